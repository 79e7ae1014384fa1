// Evaluate-then-pick for one session and one sampler, the loop of `run` and `chat`: eval(tokens)
// runs tokens through the session, next() is the sampler's pick after them. With a greedy
// sampler (Sampler::greedy: temperature 0, no penalty) eval asks the session for the argmax
// alone (Session::eval_argmax): with the output layer on a device only the token id crosses the
// link, and it is the token sampling the logits would pick.
#pragma once
#include <cstdint>
#include <span>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/session.h"

namespace hc {

class Decoder {
 public:
  // need_logits: the caller reads session.logits() after eval (no argmax shortcut then).
  Decoder(Session& session, Sampler& sampler, bool need_logits = false)
      : s_(session), sampler_(sampler), ids_only_(sampler.greedy() && !need_logits) {}

  Status eval(std::span<const int32_t> tokens);
  // The next token after the last eval().
  int32_t next();
  // Whether evals bring back only the greedy id.
  bool ids_only() const { return ids_only_; }

 private:
  Session& s_;
  Sampler& sampler_;
  bool ids_only_;
  int32_t greedy_ = 0;
};

}  // namespace hc
