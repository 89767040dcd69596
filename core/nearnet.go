package core

import (
	"github.com/flagcx/flagcx-go/internal/hostnet"
)

// nearNet tells the host network which accelerator the rank drives (its
// PCI bus id, from the plugin's device info), so that the network plugin's
// device nearest to it carries the rank's links (internal/hostnet/topo/topo.go).
// A host rank, or a device without a bus id, leaves the choice to hostnet
// (the first device). It applies after the caller's options and copies the
// configuration they gave, which other ranks of the process may share.
func nearNet(be Backend) Option {
	return func(o *options) {
		if !be.OnDevice() {
			return
		}
		info, err := be.Plugin.DeviceInfo(be.Device)
		if err != nil || info.PCIBusID == "" {
			return
		}
		var cfg hostnet.Config
		if o.net != nil {
			cfg = *o.net
		} else if cfg, err = hostnet.ConfigFromEnv(); err != nil {
			return // InitRank reads the environment again and reports it
		}
		cfg.NearPCI = info.PCIBusID
		o.net = &cfg
	}
}
