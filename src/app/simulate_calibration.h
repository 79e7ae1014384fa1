// hotcold simulate --calibrate: this machine measured (the read probe, the engine's dense decode
// and sparse row kernels on a model, the CPU device's bandwidth and per-operation costs) into the
// JSON that --calibration reads back, and that calibration as the "host" hardware
// (docs/SIMULATE.md "Calibration").
#pragma once
#include <cstdint>
#include <string>

#include "app/simulate_flags.h"
#include "core/status.h"
#include "perfmodel/hardware.h"

namespace hc::simcmd {

struct Calibration {
  std::string path, model, date;
  int threads = 0;
  int cores = 0;              // hardware threads of the machine
  double read_gbps = 0;       // membw read probe, best pass
  perfmodel::HostEfficiency eff;
  bool has_device = false;
  int device_threads = 0;
  double dev_dense_gbps = 0;  // the CPU device's matmul GB/s
  double dev_mem_gbps = 0;    // its membw probe
  double link_gbps = 0, op_us = 0, sync_us = 0;
  double sleep_overshoot_us = 0;  // a paced CPU device's extra per sleep
  uint64_t dev_overhead_bytes = 0, dev_fixed_bytes = 0;
};

// A calibration file, checked against its own bounds (docs/SIMULATE.md).
Result<Calibration> read_calibration(const std::string& path);
// Measures this machine on f.model and writes f.out (read back before it is written).
Status calibrate(const SimFlags& f);
// The machine a calibration measured, with its CPU device, as hardware ("host").
Result<perfmodel::HardwareSpec> host_hardware(const Calibration& c);

}  // namespace hc::simcmd
