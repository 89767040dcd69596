# Shared by run.sh, multihost.sh and nccl-socket.sh: load(cols, dir) reads
# each library's result file dir/<col> ("<bytes> <time_us> <busbw>" per
# line) into us[col, size] and bw[col, size], sets n (columns), c[1..n]
# (their names) and m, order[1..m] (the sizes, ascending); label(s) names a
# size as the tables print it.
function load(cols, dir,    i, j, f, line, v, s, t, sizes) {
  n = split(cols, c, " ")
  for (i = 1; i <= n; i++) {
    f = dir "/" c[i]
    while ((getline line < f) > 0) { split(line, v, " "); us[c[i], v[1]] = v[2]; bw[c[i], v[1]] = v[3]; sizes[v[1]] = 1 }
  }
  m = 0; for (s in sizes) order[++m] = s + 0
  for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
}
function label(s) {
  return s >= 1048576 ? sprintf("%d MiB", s / 1048576) : (s >= 1024 ? sprintf("%d KiB", s / 1024) : sprintf("%d B", s))
}
