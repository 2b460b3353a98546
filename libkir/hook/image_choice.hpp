// Which image of a registration the layer reads and hands out: free functions
// over a fatbin container's entries and the device's compute capability.
#pragma once

#include <string>

#include "kir/cuda/fatbin.hpp"

namespace kir::hook {

/// The compute capability (e.g. 90) of device 0 as the CUDA driver reports it,
/// or 0 without a driver or device. Asked once per process; registration runs
/// before main, when device 0 is the current device.
int device_compute_capability();

/// How well fatbin entry `e` suits device `cc` (higher is better; 0: unusable):
/// its own cubin, then a compatible cubin (same major, lower minor), then PTX
/// the driver can JIT (arch <= device), the newest of each first.
int suitability(const FatbinEntry& e, int cc);

/// The image launches will use: KIR_HOOK_ARCH=sm_NN (`want`) when set; else the
/// one device `cc` would load (its cubin, a compatible cubin, or PTX); else (no
/// device, or none suits it) the cubin of the highest architecture, else PTX.
const FatbinEntry* pick_image(const FatbinContainer& container, const char* want, int cc);

/// The PTX entry of `container` the driver would JIT on device `cc`: the
/// newest not above it (the newest of all when cc is 0).
const FatbinEntry* pick_ptx(const FatbinContainer& container, int cc);

/// The processor part of an offload-bundle target ("gfx90a" of "gfx90a:xnack+").
std::string processor(const std::string& target);

}  // namespace kir::hook
