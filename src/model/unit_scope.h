// The model's unit hooks and the one way the model calls them: a UnitScope per unit group.
//
// A UnitHooks object sees each unit before and after its forward and backward; the ZeRO
// engine gathers, releases and reduces there (zero/engine.h), so the order of the calls is
// part of its contract (tests/unit/unit_scope_test.cpp holds it). A unit's layer comes with
// siblings that live and die with it: block l's LoRA adapters ("lora.<l>"), later its
// experts. A UnitScope opens the group (before_* on the unit, then on each sibling present)
// and closes it when it goes (after_* on the siblings in reverse, then on the unit), so no
// path through the model can leave a pair half called.
//
// Two spans cross a scope's braces, and the scope says so rather than hiding the call:
// a unit opened by an earlier scope that left it open (Opened::Earlier; a tied head reads
// the embedding unit kept from the input), and a unit this scope opens and leaves open for
// a later one (leave_open()).
//
// An exception unwinding a scope closes nothing: after_backward starts a gradient
// reduction, and the other ranks may not be at this point (train/step_protocol.h's
// MicroBatch does the same for the micro-batch).
#pragma once
#include <initializer_list>

#include "model/registry.h"

namespace zt::model {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(Unit&) {}
  virtual void after_forward(Unit&) {}
  virtual void before_backward(Unit&) {}
  virtual void after_backward(Unit&) {}
};

enum class Pass { Forward, Backward };
// Whether a scope's unit is opened by the scope (Here) or was opened by an earlier scope
// that left it open (Earlier: the scope only closes it).
enum class Opened { Here, Earlier };

class UnitScope {
 public:
  static constexpr int kMaxSiblings = 3;

  // Opens `unit` (unless Opened::Earlier), then each sibling present; null units are absent.
  UnitScope(UnitHooks& hooks, Pass pass, Unit* unit, std::initializer_list<Unit*> siblings = {},
            Opened opened = Opened::Here);
  UnitScope(const UnitScope&) = delete;
  UnitScope& operator=(const UnitScope&) = delete;
  // Closes the siblings in reverse, then the unit (unless left open). A hook's error
  // propagates unless an exception is already unwinding the scope (then nothing is closed).
  ~UnitScope() noexcept(false);

  // The unit stays open when the scope goes (its siblings still close): a later scope
  // constructed with Opened::Earlier, or the other pass, takes it over.
  void leave_open() { unit_open_ = false; }

 private:
  UnitHooks& hooks_;
  Pass pass_;
  Unit* unit_;
  Unit* siblings_[kMaxSiblings] = {};
  int sibling_count_ = 0;
  bool unit_open_;
  int uncaught_at_start_;
};

}  // namespace zt::model
