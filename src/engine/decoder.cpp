#include "engine/decoder.h"

namespace hc {

Status Decoder::eval(std::span<const int32_t> tokens) {
  if (!ids_only_) return s_.eval(tokens);
  HC_ASSIGN_OR_RETURN(greedy_, s_.eval_argmax(tokens));
  return Status::Ok();
}

int32_t Decoder::next() {
  return ids_only_ ? greedy_ : sampler_.sample(s_.logits(), s_.history());
}

}  // namespace hc
