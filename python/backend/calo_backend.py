"""The build backend of the calo package (PEP 517 and PEP 660): pure standard library, nothing to download.

`pip install ./python` builds here: the wheel is written straight from calo/ into pip's own folder, so the
source tree is left as it was (setuptools left build/ and calo.egg-info/ in it), and no build dependency is
fetched, so the install works offline and with pip's build isolation. The project's metadata is read from
pyproject.toml's [project] table (tomllib, Python >= 3.11; tomli before, which pip then installs).
"""

import base64
import hashlib
import io
import os
import sys
import tarfile
import time
import zipfile

# Python wrote this module's bytecode to backend/__pycache__/ when pip imported it, before running it: removed
# here, so that a build leaves the source tree exactly as it was (nothing else is imported from the tree).
sys.dont_write_bytecode = True
_CACHED = globals().get("__cached__")
if _CACHED:
    try:
        os.remove(_CACHED)
        os.rmdir(os.path.dirname(_CACHED))
    except OSError:  # not written (read-only tree, PYTHONDONTWRITEBYTECODE), or the folder holds more
        pass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "calo"
# Files of the source distribution, relative to ROOT; folders are taken whole (less caches).
SDIST_FILES = ["pyproject.toml", "README.md", "backend", PACKAGE]
WHEEL_TAG = "py3-none-any"
# Zip entries carry SOURCE_DATE_EPOCH when set, else 1980-01-01 (the earliest zip time): builds are repeatable.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))


def _project():
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            import tomli as tomllib
        except ImportError as error:  # --no-build-isolation skips get_requires_for_build_wheel
            raise ImportError("building calo on Python < 3.11 needs tomli to read pyproject.toml: "
                              "pip install tomli, or build without --no-build-isolation") from error
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        return tomllib.load(file)["project"]


def _source_files(top):
    """Files under ROOT/top (a file or a folder), sorted, without caches; paths relative to ROOT."""
    path = os.path.join(ROOT, top)
    if os.path.isfile(path):
        return [top]
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = sorted(s for s in subfolders if s != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                found.append(os.path.relpath(os.path.join(folder, name), ROOT))
    return found


def _metadata(project):
    """Core metadata 2.1 (METADATA / PKG-INFO) of the [project] table."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "license" in project and "text" in project["license"]:
        lines.append(f"License: {project['license']['text']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    for requirement in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {requirement}")
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for requirement in requirements:
            lines.append(f'Requires-Dist: {requirement}; extra == "{extra}"')
    text = "\n".join(lines) + "\n"
    readme = project.get("readme")
    if isinstance(readme, str):
        with open(os.path.join(ROOT, readme), encoding="utf-8") as file:
            text += "Description-Content-Type: text/markdown\n\n" + file.read()
    return text


def _dist_info(project):
    return f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"


def _dist_info_files(project):
    """dist-info file name -> bytes, without RECORD."""
    wheel = f"Wheel-Version: 1.0\nGenerator: calo_backend\nRoot-Is-Purelib: true\nTag: {WHEEL_TAG}\n"
    return {"METADATA": _metadata(project).encode(), "WHEEL": wheel.encode(),
            "top_level.txt": f"{PACKAGE}\n".encode()}


def _write_wheel(wheel_directory, files):
    """Writes the wheel of ``files`` (archive path -> bytes) plus dist-info; returns its file name."""
    project = _project()
    dist_info = _dist_info(project)
    for name, data in _dist_info_files(project).items():
        files[f"{dist_info}/{name}"] = data
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{project['name'].replace('-', '_')}-{project['version']}-{WHEEL_TAG}.whl"
    stamp = time.gmtime(max(EPOCH, 315532800))[:6]
    partial = os.path.join(wheel_directory, name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, stamp)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    os.replace(partial, os.path.join(wheel_directory, name))
    return name


def _read(path):
    with open(os.path.join(ROOT, path), "rb") as file:
        return file.read()


# --- PEP 517 -----------------------------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return [] if sys.version_info >= (3, 11) else ["tomli>=1.1"]


get_requires_for_build_sdist = get_requires_for_build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    dist_info = _dist_info(project)
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for name, data in _dist_info_files(project).items():
        with open(os.path.join(metadata_directory, dist_info, name), "wb") as file:
            file.write(data)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """The wheel of calo/ (the package's files as they are in the tree)."""
    return _write_wheel(wheel_directory, {path.replace(os.sep, "/"): _read(path)
                                          for path in _source_files(PACKAGE)})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """`pip install -e ./python`: a wheel whose .pth file puts this folder on sys.path, so `import calo`
    reads calo/ from the tree."""
    return _write_wheel(wheel_directory, {f"__editable__.{PACKAGE}.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = f"{project['name'].replace('-', '_')}-{project['version']}"
    name = base + ".tar.gz"
    partial = os.path.join(sdist_directory, name + ".partial")
    with tarfile.open(partial, "w:gz", format=tarfile.PAX_FORMAT) as sdist:
        def add(path, data):
            entry = tarfile.TarInfo(f"{base}/{path}")
            entry.size, entry.mtime, entry.mode = len(data), max(EPOCH, 0), 0o644
            sdist.addfile(entry, io.BytesIO(data))
        for top in SDIST_FILES:
            for path in _source_files(top):
                add(path.replace(os.sep, "/"), _read(path))
        add("PKG-INFO", _metadata(project).encode())
    os.replace(partial, os.path.join(sdist_directory, name))
    return name
