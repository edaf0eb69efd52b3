// The PCIe link of a device, read from Linux sysfs (/sys/bus/pci/devices/<bus id>/): the
// negotiated and the maximum speed and width, and the NUMA node the device hangs off. Files look
// like `current_link_speed` = "32.0 GT/s PCIe", `current_link_width` = "16", `numa_node` = "0"
// (-1: none). Virtual machines and containers often hide or fake these; whatever cannot be read
// stays empty, and callers say so.
#pragma once

#include <optional>
#include <string>

namespace dcpctl::bench {

struct PcieLink {
  std::string bus_id;                              // "0000:19:00.0", lower case as sysfs names it
  std::optional<double> speed_gts, max_speed_gts;  // GT/s per lane
  std::optional<int> width, max_width;             // lanes
  std::optional<int> numa_node;
  // PCIe generation and the theoretical rate per direction in GB/s (lanes x GT/s x line
  // encoding: 8b/10b up to Gen2, 128b/130b from Gen3), from the current link.
  std::optional<int> generation() const;
  std::optional<double> theoretical_gbps() const;
  bool known() const { return speed_gts || width; }
};

// `sysfs_root` is "/sys" except in tests. Never throws: unreadable files leave fields empty.
PcieLink read_pcie_link(const std::string& bus_id, const std::string& sysfs_root = "/sys");

// "0000:19:00.0": CUDA prints the bus id in upper case and sometimes with an 8-digit domain.
std::string normalize_bus_id(const std::string& cuda_bus_id);

}  // namespace dcpctl::bench
