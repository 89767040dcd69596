package sdk

// PluginABIVersion is the newest version of the C plugin table
// (flagcxVendorPlugin_v<N> in include/flagcx_plugin.h) this build loads.
const PluginABIVersion = 5
