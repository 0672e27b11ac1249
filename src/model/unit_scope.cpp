#include "model/unit_scope.h"

#include <exception>

#include "core/error.h"

namespace zt::model {
namespace {

void open(UnitHooks& hooks, Pass pass, Unit& unit) {
  if (pass == Pass::Forward)
    hooks.before_forward(unit);
  else
    hooks.before_backward(unit);
}

void close(UnitHooks& hooks, Pass pass, Unit& unit) {
  if (pass == Pass::Forward)
    hooks.after_forward(unit);
  else
    hooks.after_backward(unit);
}

}  // namespace

UnitScope::UnitScope(UnitHooks& hooks, Pass pass, Unit* unit, std::initializer_list<Unit*> siblings, Opened opened)
    : hooks_(hooks),
      pass_(pass),
      unit_(unit),
      unit_open_(unit != nullptr),
      uncaught_at_start_(std::uncaught_exceptions()) {
  ZT_CHECK(siblings.size() <= static_cast<size_t>(kMaxSiblings), "UnitScope: at most ", kMaxSiblings, " siblings");
  if (unit_ && opened == Opened::Here) open(hooks_, pass_, *unit_);
  for (Unit* s : siblings) {
    if (!s) continue;
    open(hooks_, pass_, *s);
    siblings_[sibling_count_++] = s;
  }
}

UnitScope::~UnitScope() noexcept(false) {
  if (std::uncaught_exceptions() > uncaught_at_start_) return;
  for (int i = sibling_count_ - 1; i >= 0; --i) close(hooks_, pass_, *siblings_[i]);
  if (unit_open_) close(hooks_, pass_, *unit_);
}

}  // namespace zt::model
