# Emulated MetaX libraries (MACA runtime + MCCL), included by
# conformance/vendorsim/vendorsim.mk:
#
#   build/vendorsim/metax/libmcruntime.so   MACA runtime (soname libmcruntime.so)
#   build/vendorsim/metax/libmccl.so        MCCL 2.16.5  (soname libmccl.so)
#
# Sonames are the names MetaX callers dlopen ("libmccl.so", [VLM]); whether
# the real libraries carry a versioned soname is unverified (⚠).

VSIM_METAX := $(VSIM_OUT)/metax/libmcruntime.so $(VSIM_OUT)/metax/libmccl.so

vendorsim: $(VSIM_METAX)

$(VSIM_OUT)/metax/libmcruntime.so: $(VSIM_DIR)/metax/mcruntime.c $(VSIM_CORE_HDR) $(VSIM_CORE) $(VSIM_DIR)/metax/vendor.mk
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libmcruntime.so -o $@ $< $(VSIM_LINK)

$(VSIM_OUT)/metax/libmccl.so: $(VSIM_DIR)/metax/mccl.c $(VSIM_CORE_HDR) $(VSIM_CORE) $(VSIM_DIR)/metax/vendor.mk
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libmccl.so -o $@ $< $(VSIM_LINK)
