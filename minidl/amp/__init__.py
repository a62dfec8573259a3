"""minidl.amp: automatic mixed precision, as torch.amp.

    scaler = minidl.amp.GradScaler("cuda")
    with minidl.autocast("cuda"):              # matrix work in float16, losses/softmax in float32
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()               # gradients of loss * scale: small ones survive float16
    scaler.step(optimizer)                      # unscale, skip the step if a gradient is inf/NaN
    scaler.update()                             # grow or back off the scale (on the device)

See docs/DESIGN.md, "Mixed precision".
"""
from .autocast_mode import (  # noqa: F401
    autocast, custom_bwd, custom_fwd, get_autocast_dtype, is_autocast_available, is_autocast_enabled,
)
from .grad_scaler import GradScaler, OptState  # noqa: F401
