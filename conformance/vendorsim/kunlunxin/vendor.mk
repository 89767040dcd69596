# Emulated Kunlunxin runtimes (conformance/vendorsim/kunlunxin), included by
# conformance/vendorsim/vendorsim.mk.
#
#   build/vendorsim/kunlunxin/libxpurt.so.1          XPU runtime (XRE4 soname)
#   build/vendorsim/kunlunxin/libbkcl.so             BKCL/XCCL, plain C names
#   build/vendorsim/kunlunxin/cxx/libbkcl.so         the same, C++-mangled names only
#
# Each links the core by soname through RUNPATH ($ORIGIN/.. or $ORIGIN/../..).

VSIM_KLX_DIR  := $(VSIM_DIR)/kunlunxin
VSIM_KLX_OUT  := $(VSIM_OUT)/kunlunxin
VSIM_KLX_LIBS := $(VSIM_KLX_OUT)/libxpurt.so.1 $(VSIM_KLX_OUT)/libbkcl.so $(VSIM_KLX_OUT)/cxx/libbkcl.so

vendorsim: $(VSIM_KLX_LIBS)

$(VSIM_KLX_OUT)/libxpurt.so.1: $(VSIM_KLX_DIR)/xpurt.c $(VSIM_CORE_HDR) $(VSIM_CORE) $(VSIM_KLX_DIR)/vendor.mk
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libxpurt.so.1 -o $@ $< $(VSIM_LINK)

$(VSIM_KLX_OUT)/libbkcl.so: $(VSIM_KLX_DIR)/bkcl.c $(VSIM_CORE_HDR) $(VSIM_CORE) $(VSIM_KLX_DIR)/vendor.mk
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libbkcl.so -o $@ $< $(VSIM_LINK)

$(VSIM_KLX_OUT)/cxx/libbkcl.so: $(VSIM_KLX_DIR)/bkcl.c $(VSIM_CORE_HDR) $(VSIM_CORE) $(VSIM_KLX_DIR)/vendor.mk
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -DVSIM_BKCL_CXX_NAMES -Wl,-soname,libbkcl.so -o $@ $< \
	  -L$(VSIM_OUT) -lflagcx-vendorsim-core -Wl,-rpath,'$$ORIGIN/../..'
