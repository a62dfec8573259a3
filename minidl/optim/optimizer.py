"""Optimizer: the base class of every update rule (SGD, Adam, RMSprop, ...).

An optimizer holds *parameter groups*: a list of dicts, each with "params" (a list of leaf tensors)
and its own hyper-parameters (lr, momentum, ...); keys a group leaves out take the optimizer's
defaults. Per-parameter running statistics (momentum buffers, Adam's moments) live in
`self.state[param]`.

`step()` updates every parameter that has a gradient *in place*, on `p._data`, with the array module
of that array (NumPy or CuPy), so one update rule runs on both devices. Hyper-parameters and step
counts stay Python numbers on the host, so an update on the GPU is a few kernel launches and never a
round trip to read a value back.

`state_dict()` / `load_state_dict()` use PyTorch's layout, so a checkpoint reads the same:
    {"state": {0: {"step": 3, "exp_avg": Tensor, ...}, 1: {...}},
     "param_groups": [{"lr": 0.01, ..., "params": [0, 1]}, ...]}
Parameters are named by their position across the groups, in order.
"""
from __future__ import annotations

import copy
import math
import numbers
import operator

import numpy as np

from .._dtypes import is_floating
from .. import _device
from .. import primitives as P
from ..autograd.function import enable_grad, no_grad
from ..autograd.tensor import Tensor
from ._multi_tensor import ParamGroup, address, as_param_group


def _plain(value):
    """NumPy scalars (also inside tuples) as Python numbers, so a repr shows 0.9, not np.float32(0.9)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


class _Required:
    """Marks a hyper-parameter that has no default: every group must give it."""

    def __repr__(self):
        return "<required parameter>"


required = _Required()


_STEP_PRE_HOOKS: dict = {}    # register_optimizer_step_pre_hook: every optimizer's
_STEP_POST_HOOKS: dict = {}


def register_optimizer_step_pre_hook(hook):
    """hook(optimizer, args, kwargs) before every optimizer's step (torch.optim.optimizer's global hook)."""
    from ..nn.hooks import RemovableHandle

    handle = RemovableHandle({"pre": _STEP_PRE_HOOKS}, "pre")
    _STEP_PRE_HOOKS[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook):
    from ..nn.hooks import RemovableHandle

    handle = RemovableHandle({"post": _STEP_POST_HOOKS}, "post")
    _STEP_POST_HOOKS[handle.id] = hook
    return handle


_STEP = operator.itemgetter("step")
_DATA = operator.attrgetter("_data")


class Optimizer:
    """Base class. Subclasses call `super().__init__(params, defaults)` and implement `_update_group`.

    Args:
        params: an iterable of tensors, or of dicts (parameter groups) with a "params" entry and
            per-group overrides of `defaults`.
        defaults: hyper-parameters used by groups that do not set them.
    """

    def __init__(self, params, defaults: dict):
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(
                f"{name}: params must be an iterable of tensors or of dicts, got a single Tensor; "
                "pass [tensor] or model.parameters()"
            )
        if isinstance(params, (set, frozenset, dict)):
            raise TypeError(
                f"{name}: params must be an ordered iterable of tensors or of dicts, got a {type(params).__name__} "
                "(its order can change between runs, so saved optimizer state would attach to the wrong "
                "parameters); pass a list"
            )
        self.defaults = dict(defaults)
        self.state: dict = {}  # param (hashed by identity) -> dict of its running statistics
        self.param_groups: list[dict] = []
        groups = list(params)
        if len(groups) == 0:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # --------------------------------------------------------------------------------------------
    # Parameter groups
    # --------------------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """Add a group {"params": [...], **overrides}; missing options take the defaults."""
        name = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(f"{name}.add_param_group: expected a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        if "params" not in group:
            raise KeyError(f"{name}.add_param_group: the group has no 'params' (a group is "
                           "{'params': [tensors...], **options})")
        params = group.get("params")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(f"{name}: parameters must be an ordered sequence (a set's order changes between runs)")
        else:
            params = list(params) if params is not None else []
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: can only optimize Tensors, but parameter {i} is a {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(
                    f"{name}: can't optimize a non-leaf Tensor (parameter {i} of shape {p.shape} was computed "
                    "by an op); optimize the leaf it came from, or call .detach().requires_grad_()"
                )
            if not is_floating(p.dtype):
                raise TypeError(f"{name}: parameter {i} of shape {p.shape} has dtype {p.dtype}; only float tensors can be optimized")
        if len({id(p) for p in params}) != len(params):
            raise ValueError(f"{name}: a parameter group contains the same tensor twice")
        group = ParamGroup(group)
        group["params"] = params

        for key, default in self.defaults.items():
            if default is required and key not in group:
                raise ValueError(f"{name}: parameter group didn't specify a value of required option {key!r}")
            group.setdefault(key, default)
        self._check_hyperparameters(group)

        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    # Hyper-parameters that must be real numbers >= 0 (NaN and inf refused), and those that must be
    # bools; subclasses list theirs, _check_hyperparameters adds the specific rules (betas, nesterov).
    _nonnegative: tuple = ("lr",)
    _flags: tuple = ()
    # The per-parameter state entries it keeps (None: not checked); load_state_dict refuses others.
    _state_keys: tuple | None = None

    def _check_hyperparameters(self, group: dict) -> None:
        """Raise ValueError (TypeError for a wrong type) for an invalid option of one group, as torch:
        lr, eps, weight_decay, momentum... must be finite numbers >= 0. Subclasses extend it."""
        name = type(self).__name__
        for key in self._nonnegative:
            check_nonnegative(name, key, group[key])
        for key in self._flags:
            if not isinstance(group[key], (bool, np.bool_)):
                raise TypeError(f"{name}: {key} must be a bool, got {type(group[key]).__name__} {group[key]!r}")

    # --------------------------------------------------------------------------------------------
    # Gradients and the update
    # --------------------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients: set .grad to None (default, frees memory) or fill it with zeros
        (on the GPU one multi-tensor launch for all float32 gradients)."""
        if not set_to_none:
            grads = [p.grad._data for group in self.param_groups for p in group["params"] if p.grad is not None]
            if grads and P.multi_tensor_supported(*grads):
                P.multi_tensor_zero(grads)
                return
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = p.grad.detach()
                    p.grad._data[...] = 0

    # GradScaler (minidl.amp) may pass grad_scale / found_inf to step() instead of unscaling the
    # gradients and reading found_inf on the host (torch's name for this capability).
    _step_supports_amp_scaling = True

    def step(self, closure=None, *, grad_scale=None, found_inf=None):
        """One update of every parameter that has a gradient. `closure()` (optional) re-evaluates the
        loss with gradients enabled and returns it; step returns that loss.

        grad_scale, found_inf (optional 0-d float32 arrays or Tensors, for loss scaling): the update
        uses grad / grad_scale, and found_inf != 0 skips it entirely (parameters, state, step counts).
        On the multi-tensor GPU path both are read by the kernel (no host sync); the per-parameter
        path reads found_inf on the host.
        """
        for hook in list(_STEP_PRE_HOOKS.values()) + list(self._step_hooks("pre").values()):
            result = hook(self, (closure,), {})
            if result is not None:
                raise RuntimeError("optimizer step pre-hook must return None (minidl does not take new arguments "
                                   "from it)")
        loss = self._apply_step(closure, grad_scale, found_inf)
        for hook in list(_STEP_POST_HOOKS.values()) + list(self._step_hooks("post").values()):
            hook(self, (closure,), {})
        return loss

    def _step_hooks(self, kind):
        return self.__dict__.setdefault("_step_hook_tables", {"pre": {}, "post": {}})[kind]

    def register_step_pre_hook(self, hook):
        """hook(optimizer, args, kwargs) -> None, called before each step() (torch's; an EMA or a logger).
        Returns a handle whose remove() unregisters it."""
        from ..nn.hooks import RemovableHandle

        table = self._step_hooks("pre")
        handle = RemovableHandle({"pre": table}, "pre")
        table[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook):
        """hook(optimizer, args, kwargs) -> None, called after each step()."""
        from ..nn.hooks import RemovableHandle

        table = self._step_hooks("post")
        handle = RemovableHandle({"post": table}, "post")
        table[handle.id] = hook
        return handle

    def _apply_step(self, closure, grad_scale, found_inf):
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        # All or nothing: every gradient is checked before the first parameter changes.
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._check_grad(p)
        grad_scale = grad_scale._data if isinstance(grad_scale, Tensor) else grad_scale
        found_inf = found_inf._data if isinstance(found_inf, Tensor) else found_inf
        with no_grad():
            for i, group in enumerate(self.param_groups):
                if not isinstance(group, ParamGroup):
                    group = self.param_groups[i] = as_param_group(group)
                if not self._multi_tensor_update(group, grad_scale, found_inf):
                    if found_inf is not None and float(found_inf) != 0.0:
                        continue  # the per-parameter path reads found_inf on the host
                    self._grad_scale = grad_scale
                    try:
                        self._update_group(group)
                    finally:
                        self._grad_scale = None
                for p in group["params"]:
                    if p.grad is not None:
                        p._version += 1  # changed in place: a graph that saved p cannot be used (as torch)
        return loss

    _grad_scale = None
    _fused = None  # the `fused` option of optimizers whose torch counterpart has no such group key

    @property
    def _capturable(self) -> bool:
        """Whether a CUDA graph may capture step() (minidl._graphs._optimizer_is_capturable): True when
        every group runs the multi-tensor GPU path, whose hyper-parameters (lr, momentum, betas, ...)
        and step counts the kernels read from device memory. Not covered: turning momentum on from
        0 after the capture (its buffers are chosen on the host).

        CAPTURE_MULTI_TENSOR_STEP = False turns this off (graphed steps then run step() eagerly after
        each replay; the capture still holds forward, loss and backward). On since the pointer-table
        upload became a capturable cudaMemcpyAsync (tests/gpu/test_multi_tensor_gpu.py, H200, 56489a4)."""
        if not CAPTURE_MULTI_TENSOR_STEP:
            return False
        if type(self)._multi_tensor_update is Optimizer._multi_tensor_update:
            return False
        for group in self.param_groups:
            if group.get("fused", self._fused) is False:
                return False
            arrays = [p._data for p in group["params"]] + [p.grad._data for p in group["params"] if p.grad is not None]
            if not P.multi_tensor_supported(*arrays):
                return False
        return True

    def _multi_tensor_update(self, group, grad_scale, found_inf) -> bool:
        """Subclasses with a multi-tensor kernel update the whole group in one go and return True;
        False sends the group to the per-parameter reference path (_update_group)."""
        return False

    def _multi_tensor_state(self, group, params, fresh):
        """(steps, slots, states) for a multi-tensor update with step counts on the device: the group's
        step-count array (rebuilt when a state is fresh), each parameter's slot in it, each one's state."""
        if fresh:
            group._steps = None
        steps = self._device_steps(group, params)
        slot = {id(p): i for i, p in enumerate(group["params"])}
        return steps, [slot[id(p)] for p in params], [self.state[p] for p in params]

    def _device_steps(self, group, params):
        """The group's device array of step counts, one slot per parameter of the group, with each
        parameter's state["step"] a 0-d Tensor viewing its slot. Rebuilt (once) when a state holds
        a Python number or a foreign array (a fresh state, a loaded checkpoint)."""
        cupy = _device.get_array_module(params[0]._data)
        members = group["params"]
        steps = group._steps
        if steps is not None and steps.size == len(members):
            # The usual step: every member's state still holds the very step tensor and array this method put
            # there (identity, by C-level maps: this runs every step over every parameter); else the full check.
            kept = getattr(group, "_step_arrays", None)
            if kept is not None:
                try:
                    arrays = list(map(_DATA, map(_STEP, map(self.state.__getitem__, members))))
                except (KeyError, AttributeError):
                    arrays = None
                if arrays is not None and len(arrays) == len(kept) and all(map(operator.is_, arrays, kept)):
                    return steps
            fine = all(
                isinstance(self.state.get(p, {}).get("step"), Tensor)
                and address(self.state[p]["step"]._data) == address(steps) + 4 * i
                for i, p in enumerate(members) if p in self.state or p.grad is not None)
            if fine:
                return steps
        steps = cupy.zeros(len(members), dtype=cupy.float32)
        for i, p in enumerate(members):
            old = self.state.get(p, {}).get("step")
            if old is None:
                continue
            value = old._data if isinstance(old, Tensor) else old
            steps[i] = value if _device.is_cuda_array(value) else float(value)  # device-to-device, or a host number
        for i, p in enumerate(members):
            if p in self.state:
                self.state[p]["step"] = Tensor._make(steps[i:i + 1].reshape(()))  # a 0-d view of the slot
        group._steps = steps
        group._step_arrays = (None if any(p not in self.state for p in members) else
                              [self.state[p]["step"]._data for p in members])
        return steps

    def _use_multi_tensor(self, group, params) -> bool:
        """The group's `fused` option: None = the multi-tensor kernels on the GPU when every array is
        C-contiguous float32 CuPy; True = required (error otherwise), and on the CPU the kernels'
        NumPy reference; False = the per-parameter path."""
        fused = group.get("fused", self._fused)
        if fused is False or not params:
            return False
        arrays = [a for p in params for a in (p._data, p.grad._data)]
        if P.multi_tensor_supported(*arrays):
            return True
        if fused and not any(_device.is_cuda_array(a) for a in arrays) and len({a.dtype for a in arrays}) == 1:
            return True
        if fused:
            raise RuntimeError(
                f"{type(self).__name__}.step: fused=True needs every parameter and gradient to be a C-contiguous "
                "float32 CUDA array (or all on the CPU, of one dtype); got " + ", ".join(f"{p.shape} {p.dtype} on {p.device}" for p in params[:4]))
        return False

    def _update_group(self, group: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement _update_group")

    def _params_and_grads(self, group, weight_decay=0.0):
        """(p, g) for each parameter of the group that has a gradient: g as _grad_of gives it, plus
        weight_decay * p when weight_decay is nonzero (L2 decay added to the gradient, as PyTorch)."""
        for p in group["params"]:
            if p.grad is None:
                continue
            g = self._grad_of(p, group["maximize"])
            yield p, (g + weight_decay * p._data if weight_decay != 0 else g)

    def _grad_of(self, p: Tensor, maximize: bool = False):
        """The gradient array of p (unscaled by grad_scale, negated to maximize), checked first."""
        g = self._check_grad(p)
        if self._grad_scale is not None:
            g = g / _device.get_array_module(g).asarray(self._grad_scale, dtype=g.dtype)
        return -g if maximize else g

    def _check_grad(self, p: Tensor):
        """p's gradient array, checked against p's dtype kind, shape and device (no array math: step()
        runs this over every parameter before the first update, so a bad gradient changes nothing)."""
        g, d = p.grad._data, p._data
        if type(g) is type(d) and g.dtype == d.dtype and g.shape == d.shape:   # the usual case: nothing to say
            return g
        if not is_floating(g.dtype):
            raise TypeError(f"{type(self).__name__}.step: gradient of dtype {g.dtype} for a parameter of dtype {p.dtype}")
        if tuple(g.shape) != p.shape:
            raise ValueError(f"{type(self).__name__}.step: gradient of shape {tuple(g.shape)} for a parameter of shape {p.shape}")
        if _device.is_cuda_array(g) != p.is_cuda:
            raise ValueError(f"{type(self).__name__}.step: gradient on {p.grad.device} for a parameter on {p.device}")
        return g

    @staticmethod
    def _zeros_like(p: Tensor) -> Tensor:
        """A state buffer of p's shape, dtype and device."""
        xp = _device.get_array_module(p._data)
        return Tensor._make(xp.zeros_like(p._data))

    # --------------------------------------------------------------------------------------------
    # Checkpoints
    # --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]} (PyTorch's layout).
        The state tensors are the optimizer's own (not copies), as in PyTorch; save() copies them."""
        index_of: dict[int, int] = {}
        packed_groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index_of.setdefault(id(p), len(index_of))
            packed["params"] = [index_of[id(p)] for p in group["params"]]
            packed_groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[index_of[id(p)]] = dict(self.state[p])
        return {"state": state, "param_groups": packed_groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what state_dict() returned. The groups must match in number and size; state tensors
        are copied onto each parameter's device (floating ones cast to its dtype). Nothing changes if
        the check fails."""
        name = type(self).__name__
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups'")
        saved_groups = state_dict["param_groups"]
        if not isinstance(saved_groups, (list, tuple)) or not all(isinstance(g, dict) for g in saved_groups):
            raise ValueError(f"{name}.load_state_dict: 'param_groups' must be a list of dicts")
        if not isinstance(state_dict["state"], dict) or not all(isinstance(e, dict) for e in state_dict["state"].values()):
            raise ValueError(f"{name}.load_state_dict: 'state' must be a dict of dicts (parameter index -> its state)")
        for i, saved in enumerate(saved_groups):
            if not isinstance(saved.get("params"), (list, tuple)):
                raise ValueError(f"{name}.load_state_dict: parameter group {i} has no 'params' list")
            # Implementation switches (torch added them over its versions) may be absent: defaults then.
            lacking = [k for k in self.defaults if k not in saved and k not in _OPTIONAL_GROUP_KEYS]
            if lacking:
                raise ValueError(
                    f"{name}.load_state_dict: parameter group {i} of the state dict has no {', '.join(map(repr, lacking))}: "
                    f"it was not saved by {name} (a state dict of another optimizer class?)"
                )
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the state dict has {len(saved_groups)} parameter groups, "
                f"this optimizer has {len(self.param_groups)}"
            )
        for i, (mine, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError(
                    f"{name}.load_state_dict: parameter group {i} has {len(saved['params'])} parameters in the "
                    f"state dict but {len(mine['params'])} in this optimizer"
                )
        param_of = {}
        for mine, saved in zip(self.param_groups, saved_groups):
            for index, p in zip(saved["params"], mine["params"]):
                param_of[_as_index(name, index)] = p
        unknown = [k for k in state_dict["state"] if _as_index(name, k) not in param_of]
        if unknown:
            raise ValueError(f"{name}.load_state_dict: state for parameter indices {unknown} that no group lists")
        # Shapes are checked before anything is written, so a bad checkpoint leaves the optimizer as it was.
        for key, entry in state_dict["state"].items():
            p = param_of[_as_index(name, key)]
            if self._state_keys is None:
                # An optimizer that does not declare its per-parameter state (LBFGS keeps a history
                # of flat vectors and counters on its first parameter): only array shapes are checked,
                # by the optimizer itself.
                continue
            for k, v in entry.items():
                if k not in self._state_keys:
                    raise ValueError(
                        f"{name}.load_state_dict: state {k!r} of parameter {key} is not one {name} keeps "
                        f"({', '.join(self._state_keys)}): a state dict of another optimizer class?"
                    )
                is_array = isinstance(v, (Tensor, np.ndarray)) or _device.is_cuda_array(v)
                if k == "step":
                    n = (v.numel() if isinstance(v, Tensor) else v.size) if is_array else 1
                    step = v.item() if is_array and n == 1 else v
                    if n != 1 or isinstance(step, bool) or not isinstance(step, numbers.Real) \
                            or not step >= 0 or step != int(step):
                        raise ValueError(f"{name}.load_state_dict: 'step' of parameter {key} must be a count >= 0, got {v!r}")
                    continue
                if v is None:  # torch's SGD saves momentum_buffer=None before the first step
                    continue
                if not is_array:
                    raise ValueError(
                        f"{name}.load_state_dict: state {k!r} of parameter {key} must be a tensor of shape {p.shape}, "
                        f"got {type(v).__name__}"
                    )
                if tuple(v.shape) != p.shape:
                    raise ValueError(
                        f"{name}.load_state_dict: state {k!r} of parameter {key} has shape {tuple(v.shape)}, "
                        f"the parameter has shape {p.shape}"
                    )
                if not is_floating(v.dtype):
                    raise ValueError(
                        f"{name}.load_state_dict: state {k!r} of parameter {key} has dtype {v.dtype}, expected a float dtype"
                    )

        new_groups = []
        for i, (mine, saved) in enumerate(zip(self.param_groups, saved_groups)):
            group = {k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}
            if isinstance(group.get("betas"), list):  # a tuple may come back as a list from JSON-like storage
                group["betas"] = tuple(group["betas"])
            group["params"] = mine["params"]
            for k in _OPTIONAL_GROUP_KEYS:
                if k in self.defaults and k not in group:
                    group[k] = self.defaults[k]
            try:
                # A NaN, inf or negative lr in a checkpoint is refused too, with one exception: a group a
                # scheduler drives (it has "initial_lr", itself checked) may have gone a little below zero,
                # as torch's OneCycleLR(anneal_strategy="linear") does at the end of a short schedule.
                checked = dict(group)
                if "initial_lr" in group:
                    check_nonnegative(name, "initial_lr", group["initial_lr"])
                    if isinstance(group["lr"], numbers.Real) and math.isfinite(group["lr"]) and group["lr"] < 0:
                        checked["lr"] = 0.0
                self._check_hyperparameters(checked)
                group.update({k: v for k, v in checked.items() if k not in ("lr", "params")})
            except (TypeError, ValueError) as e:
                raise ValueError(f"{name}.load_state_dict: parameter group {i}: {e}") from None
            new_groups.append(as_param_group(group))
        new_state = {}
        for key, entry in state_dict["state"].items():
            p = param_of[_as_index(name, key)]
            new_state[p] = {k: _state_value_for(p, k, v) for k, v in entry.items()}
        # Everything is checked and converted: only now does the optimizer change.
        self.state = new_state
        self.param_groups = new_groups

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {_plain(group[key])}")
        lines.append(")")
        return "\n".join(lines)


# See Optimizer._capturable: whether a CUDA graph may capture the multi-tensor optimizer step.
CAPTURE_MULTI_TENSOR_STEP = True

_OPTIONAL_GROUP_KEYS = ("fused", "foreach", "capturable", "differentiable")


def check_nonnegative(name: str, key: str, value) -> None:
    """value must be a real number >= 0 and finite (torch refuses NaN; inf is refused here too)."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name}: {key} must be a number, got a tensor of shape {value.shape}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: {key} must be a number, got {type(value).__name__} {value!r}")
    if not 0.0 <= value < float("inf"):
        what = "learning rate" if key == "lr" else key
        raise ValueError(f"{name}: invalid {what} {value} (must be a finite number >= 0)")


def _as_index(name, key) -> int:
    if isinstance(key, bool) or not isinstance(key, numbers.Integral) and not (isinstance(key, str) and key.isdigit()):
        raise ValueError(f"{name}.load_state_dict: parameter index {key!r} is not an integer")
    return int(key)


def _state_value_for(p: Tensor, key: str, value):
    """A copy of one saved state entry, placed like parameter p ("step" stays a number)."""
    if isinstance(value, Tensor):
        value = value._data
    if isinstance(value, np.ndarray) or _device.is_cuda_array(value):
        if key == "step":  # PyTorch saves step as a 0-d tensor; minidl keeps it a Python number
            host = value.get() if _device.is_cuda_array(value) else value
            return host.item()
        array = _device.move_array(value, p.device)
        dtype = p.dtype if is_floating(array.dtype) else array.dtype
        return Tensor._make(array.astype(dtype, copy=True))  # a copy: never share the caller's arrays
    if isinstance(value, numbers.Number):
        return value
    return copy.deepcopy(value)
