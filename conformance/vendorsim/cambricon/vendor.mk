# Emulated Cambricon runtimes (vendorsim layer), included by vendorsim.mk.
#
#   build/vendorsim/cambricon/libcnrt.so   CNRT 6.14.1 (soname libcnrt.so)
#   build/vendorsim/cambricon/libcncl.so   CNCL 1.25.0 (soname libcncl.so)
#
# The sonames are the file names the cambricon plugin dlopens
# ($NEUWARE_HOME/lib64/libcnrt.so, libcncl.so). Whether the real libraries
# carry a versioned soname is not known here (docs/vendor-facts.md,
# "Cambricon: libraries", names only the unversioned files); the plugin opens
# them by these names either way.
VSIM_CAMBRICON := $(VSIM_OUT)/cambricon/libcnrt.so $(VSIM_OUT)/cambricon/libcncl.so

vendorsim: $(VSIM_CAMBRICON)

$(VSIM_OUT)/cambricon/lib%.so: $(VSIM_DIR)/cambricon/%.c $(VSIM_CORE_HDR) $(VSIM_CORE)
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,lib$*.so -o $@ $< $(VSIM_LINK)
