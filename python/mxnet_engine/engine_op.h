#pragma once
// One Troika collective pushed onto MXNet's dependency engine, as Horovod's MXNet ops are: the
// engine runs it once every earlier write of its input arrays finished, and nothing reads or
// writes its output arrays until it completed. Running it submits to Troika and returns at once
// (the engine's worker is free again); Troika's completion completes the engine operation, with
// the operation's error if it failed, which every later read of the outputs raises.
//
// Thread-safe: pushed from Python's thread, run on an engine worker, completed on Troika's.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "python/mxnet_engine/mxnet_api.h"
#include "troika/troika.h"

namespace troika::mxnet {

enum class Kind { kAllreduce, kBroadcast, kReducescatter };

// One array of the operation: its NDArray handles (input and output; the same one in place),
// and its element type and shape.
struct Tensor {
  std::string name;
  void* input = nullptr;   // NDArrayHandle
  void* output = nullptr;  // NDArrayHandle
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  size_t output_bytes = 0;  // reducescatter: the output's capacity
};

struct Request {
  Kind kind = Kind::kAllreduce;
  // Non-empty: the tensors are one grouped operation (allreduce, reducescatter) of that name;
  // empty: one tensor.
  std::string group;
  std::vector<Tensor> tensors;
  AllreduceOptions reduce;  // allreduce, reducescatter (process_set for broadcast too)
  int root = 0;             // broadcast: the root's position in the process set
  int priority = 0;         // the engine's priority (Horovod's `priority`)
  MxContext where;          // the arrays' device
  // Python's thread waits for the result (troika.mxnet's own blocking calls): from the moment
  // the engine runs the operation, the rank counts as waiting for it, for deadlock detection
  // (Handle::OnDone's caller_waits). False for the training path: the rank may be computing.
  bool caller_waits = false;
};

// The context engine operations submit to when they run (null: none, they then fail saying
// so). Set at every init() and cleared at shutdown(); a context handed over must stay valid
// while the library is loaded (troika.mxnet keeps every one).
void BindContext(Context* context);

// Pushes `request` onto the engine. Errors: the arrays' data cannot be read, or the engine
// refused the push (with MXNet's message). A failure of the collective itself is the engine
// operation's, raised by reading its outputs.
absl::Status Push(Request request);

}  // namespace troika::mxnet
