"""torch.hub, the part that fetches weights: load_state_dict_from_url downloads a checkpoint once into the hub
directory (hub_dir/checkpoints, as torch) and reads it with minidl.load, which reads torch's .pt files. get_dir /
set_dir, download_url_to_file (optionally checking the SHA-256 prefix in the file name, as torch's check_hash).

torch.hub.load / list / help run a GitHub repository's hubconf.py, code written against torch's own modules and
usually building torchvision or timm models: out of minidl's scope, and they say so.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request

__all__ = ["get_dir", "set_dir", "download_url_to_file", "load_state_dict_from_url", "load", "list", "help"]

_hub_dir: str | None = None
_HASH = re.compile(r"-([a-f0-9]*)\.")


def get_dir() -> str:
    """$TORCH_HOME/hub (default ~/.cache/torch/hub), or what set_dir chose."""
    if _hub_dir is not None:
        return _hub_dir
    home = os.environ.get("TORCH_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "torch")
    return os.path.join(home, "hub")


def set_dir(d) -> None:
    global _hub_dir
    _hub_dir = os.path.expanduser(str(d))


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """url's bytes into dst (through a temporary file beside it, renamed when complete); hash_prefix: the start of
    the SHA-256 the bytes must have."""
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(dst)), suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="B", unit_scale=True, desc=os.path.basename(dst))
            while True:
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
                digest.update(chunk)
                if bar is not None:
                    bar.update(len(chunk))
            if bar is not None:
                bar.close()
        if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
            raise RuntimeError(f"hub.download_url_to_file: invalid hash value (expected \"{hash_prefix}\", got "
                               f"\"{digest.hexdigest()}\") for {url}")
        shutil.move(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True, check_hash=False, file_name=None,
                             weights_only=False):
    """The checkpoint at url, downloaded once into model_dir (default get_dir()/checkpoints), read by minidl.load."""
    from .utils.serialization import load as load_checkpoint

    model_dir = model_dir or os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    name = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
        match = _HASH.search(name) if check_hash else None
        download_url_to_file(url, path, match.group(1) if match else None, progress=progress)
    return load_checkpoint(path, map_location=map_location)


def _out_of_scope(op):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"torch.hub.{op}: running a repository's hubconf.py (code written for torch's own "
                                  "modules, usually building torchvision or timm models) is outside minidl's scope; "
                                  "build the model in minidl and load its weights with hub.load_state_dict_from_url")

    refuse.__name__ = op
    return refuse


load, list, help = _out_of_scope("load"), _out_of_scope("list"), _out_of_scope("help")  # noqa: A001


load_url = load_state_dict_from_url   # (torch.utils.model_zoo.load_url, its older name)
