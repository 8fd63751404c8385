"""A PEP 517 build backend for the kspec client, standard library only.

The package is pure Python with no dependencies, so a wheel is the files
of kspec/ plus the three .dist-info files the wheel format asks for
(METADATA, WHEEL, RECORD).  setuptools would need `wheel`, which a fresh
Debian 12 venv does not have, and a network to fetch it; this needs
neither.  Supports build_wheel and build_sdist (and pip's metadata hook).
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "kspec"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
    raise RuntimeError("no __version__ in kspec/__init__.py")


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Client of kspecd, the kspec kernel server\n"
            "Requires-Python: >=3.9\n" % (NAME, _version()))


def _sources():
    """(path in the package tree, absolute path) of every module."""
    out = []
    for root, dirs, files in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(root, f)
                out.append((os.path.relpath(full, HERE).replace(os.sep, "/"),
                            full))
    return out


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "%s,sha256=%s,%d" % (path, digest.rstrip(b"=").decode(), len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory,
                                     config_settings=None):
    info = "%s-%s.dist-info" % (NAME, _version())
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as f:
        f.write(_metadata())
    return info


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    version = _version()
    info = "%s-%s.dist-info" % (NAME, version)
    name = "%s-%s-%s.whl" % (NAME, version, TAG)
    files = [(p, open(full, "rb").read()) for p, full in _sources()]
    files.append((info + "/METADATA", _metadata().encode()))
    files.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: "
                                    "kspec_build\nRoot-Is-Purelib: true\n"
                                    "Tag: %s\n" % TAG).encode()))
    record = [_record_line(p, d) for p, d in files]
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for p, d in files:
            z.writestr(zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0)), d,
                       zipfile.ZIP_DEFLATED)
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "_build/kspec_build.py"] + \
                [p for p, _ in _sources()]:
            t.add(os.path.join(HERE, rel), arcname=base + "/" + rel)
        pkg = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
               % (NAME, _version())).encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg)
        t.addfile(ti, io.BytesIO(pkg))
    return name
