# flagcx conformance (conformance/README.md), included by the top Makefile.
#
#   make conformance        every plugin in build/plugins on the emulated
#                           vendor runtimes, then the example plugin (the host
#                           CPU as a vendor: nothing to emulate); the quick
#                           matrix unless CONFORMANCE_FLAGS says otherwise
#   make conformance-full   the same with the full matrix
#
# Both end with the mutants (MUTANT_TESTS): one-bug builds of the example
# and of the nvidia plugin that the suite must fail, each for the right
# reason (conformance/README.md, "Negative controls"), and the leak check's
# positive control, a correct plugin with per-call scratch buffers that
# comm.leak must pass. `make test` leaves them to this target.
#
# Reports (JUnit XML and JSON) go to build/conformance/. The example plugin
# is built into a directory of its own, build/example-plugin/, so that it
# never shows up in `flagcx plugins`, `flagcx bench` or the emulated run.

EXAMPLE_PLUGIN_DIR  := $(BUILD)/example-plugin
EXAMPLE_PLUGIN      := $(EXAMPLE_PLUGIN_DIR)/libflagcx-example.so
# The same source against the ABI v1 header: a plugin built before v2.
EXAMPLE_PLUGIN_V1   := $(BUILD)/example-plugin-v1/libflagcx-example.so
CONFORMANCE_OUT     := $(BUILD)/conformance
CONFORMANCE_FLAGS   ?= --quick
CONFORMANCE_NP      ?= 2,3,4,5

MUTANT_TESTS        := TestNegativeControls|TestStreamMutants|TestLeakCheckPositiveControl

.PHONY: example-plugin conformance conformance-full conformance-mutants
all: example-plugin
example-plugin: $(EXAMPLE_PLUGIN) $(EXAMPLE_PLUGIN_V1)

# Built as a vendor team builds a plugin out of tree: the header and a C compiler.
$(EXAMPLE_PLUGIN): conformance/example/example.c sdk/include/flagcx_plugin.h
	@mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -Wall -Werror -std=gnu11 -fvisibility=hidden -Isdk/include -o $@ $< -lrt -pthread

$(EXAMPLE_PLUGIN_V1): conformance/example/example.c conformance/example/v1/flagcx_plugin.h
	@mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -Wall -Werror -std=gnu11 -fvisibility=hidden -Iconformance/example/v1 -o $@ $< -lrt -pthread

conformance: all
	@mkdir -p $(CONFORMANCE_OUT)
	$(BIN)/flagcx --plugin-dir $(BUILD)/plugins conformance --emulated --np $(CONFORMANCE_NP) $(CONFORMANCE_FLAGS) \
	  --junit $(CONFORMANCE_OUT)/plugins-emulated.xml --json $(CONFORMANCE_OUT)/plugins-emulated.json
	$(BIN)/flagcx --plugin-dir $(EXAMPLE_PLUGIN_DIR) conformance --np $(CONFORMANCE_NP) $(CONFORMANCE_FLAGS) \
	  --junit $(CONFORMANCE_OUT)/example.xml --json $(CONFORMANCE_OUT)/example.json
	$(MAKE) conformance-mutants

conformance-mutants: all
	$(GO) test -count=1 -timeout 10m -run '^($(MUTANT_TESTS))$$' ./conformance/suite

conformance-full:
	$(MAKE) conformance CONFORMANCE_FLAGS=
