"""Where datasets live, and how they get there.

The data root is, in order: the `root` argument, the environment variable MINIDL_DATA, or
`~/.cache/minidl` (per user). A missing file is downloaded with urllib (a tqdm progress bar, the md5
checked) from each known mirror in turn; torchvision's downloader is tried as a last resort when
torchvision imports cleanly. Offline, the error lists the files, where to put them and the env var.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

ENV_VAR = "MINIDL_DATA"


OFFLINE_VAR = "MINIDL_OFFLINE"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are neither on disk nor downloadable.

    str(e) is the full message for a library user (it names root=). The attributes let a program
    say the same in its own terms: `dataset`, `files` (the missing names, as the message gives them),
    `folder` (where they belong), `reason` (why they could not be downloaded, or None), and
    `e.short("--data DIR")` is one line that points at the program's own option instead of root=.
    """

    def __init__(self, message: str, *, dataset: str | None = None, files=(), folder=None,
                 reason: str | None = None, hint: str = ""):
        super().__init__(message)
        self.dataset, self.files, self.folder, self.reason = dataset, list(files), folder, reason
        self.hint = hint.strip()

    def short(self, root_option: str = "root=") -> str:
        """One line: what is missing, where it belongs, and the option that points elsewhere."""
        if self.dataset is None:
            return str(self).split(". ")[0]
        why = ("" if not self.reason else " (download=False)" if self.reason == "download=False"
               else f" (download failed: {self.reason})")
        return (f"{self.dataset}: missing {', '.join(self.files)} in {self.folder}{why}; put them there, "
                f"or point {root_option} (or ${ENV_VAR}) at a folder that holds them."
                + (f" {self.hint}" if self.hint else ""))


def data_root(root=None) -> Path:
    """The folder that holds the datasets: `root`, else $MINIDL_DATA, else ~/.cache/minidl."""
    if root is None:
        root = os.environ.get(ENV_VAR) or os.path.join("~", ".cache", "minidl")
    return Path(root).expanduser()


def md5sum(path, chunk_size=1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_with_urllib(url: str, destination: Path, timeout: float = 60.0) -> None:
    from tqdm.auto import tqdm

    partial = destination.with_name(destination.name + ".part")
    request = urllib.request.Request(url, headers={"User-Agent": "minidl"})
    # Written to a .part file and renamed at the end, so an interrupted download never looks complete.
    with urllib.request.urlopen(request, timeout=timeout) as response, open(partial, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=destination.name) as bar:
            for chunk in iter(lambda: response.read(1 << 16), b""):
                out.write(chunk)
                bar.update(len(chunk))
    partial.replace(destination)


def _download_with_torchvision(url: str, destination: Path, md5: str | None) -> bool:
    """torchvision's downloader (it knows about redirects and Google Drive), if torchvision imports."""
    try:
        from torchvision.datasets.utils import download_url
    except Exception:  # not installed, or installed but broken against this torch: stay optional
        return False
    download_url(url, root=str(destination.parent), filename=destination.name, md5=md5)
    return destination.exists()


def download_file(urls, destination, md5: str | None = None) -> Path:
    """Download `destination` from the first of `urls` that works, checking the md5 when given.

    Raises OSError naming every URL tried and why it failed.
    """
    destination = Path(destination)
    if os.environ.get(OFFLINE_VAR, "").strip() not in ("", "0"):
        raise OSError(f"could not download {destination.name}: offline (${OFFLINE_VAR} is set)")
    created = [p for p in [destination.parent, *destination.parent.parents] if not p.exists()]
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _download_from_mirrors(urls, destination, md5)
    except OSError:
        for folder in created:  # deepest first: leave no empty folders behind a failed download
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (another file landed there): keep it and its parents
        raise


def _download_from_mirrors(urls, destination: Path, md5: str | None) -> Path:
    failures = []
    for url in urls:
        try:
            _download_with_urllib(url, destination)
        except (urllib.error.URLError, OSError, ValueError) as e:
            failures.append(f"{url}: {e}")
            continue
        if md5 is not None and md5sum(destination) != md5:
            failures.append(f"{url}: md5 mismatch (expected {md5}, got {md5sum(destination)})")
            destination.unlink()
            continue
        return destination
    for url in urls:
        try:
            if _download_with_torchvision(url, destination, md5):
                return destination
        except Exception as e:
            failures.append(f"{url} (torchvision): {e}")
    raise OSError(f"could not download {destination.name}: " + "; ".join(failures))


def missing_files_message(dataset: str, files, folder, extra: str = "") -> str:
    names = ", ".join(str(f) for f in files)
    return (f"{dataset}: missing {names}. Download them by hand and put them in {folder}, pass root= "
            f"to the dataset, or set the environment variable {ENV_VAR} to a folder that holds them "
            f"(the default root is ~/.cache/minidl).{extra}")


def _first_reason(error: str) -> str:
    """The cause of the first failure in download_file's message (e.g. 'network is unreachable')."""
    return error.split("; ")[0].rsplit(": ", 1)[-1].strip().strip("<>")


def fetch_files(dataset: str, resources, folder, download: bool, hint: str = "", names=None,
                also_missing=()) -> list[Path]:
    """Make sure `folder` holds every file of `resources` = [(filename, [urls], md5)]; return paths.

    With download=False, or when a download fails (offline), raise DatasetNotFoundError naming the
    missing files, the folder to put them in and the environment variable. `names` maps a file name
    to how the error names it (e.g. "train-images-idx3-ubyte(.gz)" where a plain file works too);
    `also_missing` names files the error lists too (those of the other split: one error, not two).
    """
    names = names or {}
    folder = Path(folder)
    paths, missing = [], []
    for filename, urls, md5 in resources:
        path = folder / filename
        paths.append(path)
        if not path.exists():
            missing.append((filename, urls, md5))
    if not missing:
        return paths
    if not download:
        files = [names.get(m[0], m[0]) for m in missing] + list(also_missing)
        raise DatasetNotFoundError(missing_files_message(dataset, files, folder, hint + " Or pass download=True."),
                                   dataset=dataset, files=files, folder=folder, reason="download=False", hint=hint)
    errors = []
    for filename, urls, md5 in missing:
        try:
            download_file(urls, folder / filename, md5)
        except OSError as e:
            errors.append(str(e))
    if errors:
        still_missing = [m[0] for m in missing if not (folder / m[0]).exists()]
        sources = "; ".join(f"{m[0]} from {m[1][0]}" for m in missing if m[0] in still_missing)
        files = [names.get(m, m) for m in still_missing] + list(also_missing)
        raise DatasetNotFoundError(
            missing_files_message(dataset, files, folder, f"{hint} Sources: {sources}.")
            + " Download errors: " + " | ".join(errors),
            dataset=dataset, files=files, folder=folder, reason=_first_reason(errors[0]), hint=hint)
    return paths


def safe_extract_tar(archive, folder, member_prefix: str) -> None:
    """Extract the regular files under `member_prefix` of a tar archive, refusing paths that escape."""
    import tarfile

    folder = Path(folder).resolve()
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(member_prefix):
                continue
            target = (folder / member.name).resolve()
            if folder not in target.parents:
                raise ValueError(f"{archive}: member {member.name!r} would be written outside {folder}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
