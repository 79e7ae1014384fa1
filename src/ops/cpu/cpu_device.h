// The CPU device: ops::Device (ops/device.h) on its own worker thread(s), with its own memory
// budget and a configurable bandwidth model. It stands in for a GPU wherever there is none, so
// the placement planner, the hybrid executor and the merge of device and host partial results
// run, and are tested, on every machine.
//
// - Queue: one worker thread takes queued operations in order and runs each on the device's own
//   ThreadPool (n_threads, the worker being thread 0): the host's pool is never borrowed, so host
//   and device work on the same token really overlap.
// - Memory: 64-byte aligned heap blocks, each charged to the budget until freed; an allocation
//   past the budget fails. measured_bytes() is the sum of live blocks.
// - Arithmetic: the host's kernels (ops/cpu) on the same layouts; upload_weight also builds the
//   host's decode layout when the host weight has one, so every result equals the host's bit
//   for bit (tests/ops/cpu_device_test.cpp).
// - Bandwidth model: profile() reports mem_gbps (measured with the membw probe on the device's
//   threads at open, or as configured) and the configured link_gbps; with emulate_gbps > 0,
//   every weight-streaming operation is paced to last at least bytes / emulate_gbps, so a
//   "slow device" can be emulated in experiments.
#pragma once
#include <memory>

#include "core/status.h"
#include "ops/device.h"

namespace hc::ops {

Result<std::unique_ptr<Device>> open_cpu_device(const DeviceOptions& opt);

}  // namespace hc::ops
