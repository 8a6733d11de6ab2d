"""`pip install ./python` as a user runs it, on a copy of this folder: it builds offline (no index, pip's build
isolation on), installs a working package, and leaves the source tree exactly as it was (setuptools left
build/ and calo.egg-info/ in it). Also `pip install -e` and the source distribution."""

import base64
import csv
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calo_test_env import PACKAGE_ROOT, calo  # noqa: E402

sys.path.insert(0, PACKAGE_ROOT)
import calo as calo_package  # noqa: E402  (the package from this source tree)


def tree(root):
    """Every folder under root, and every file with its size and modification time."""
    entries = {}
    for folder, subfolders, files in os.walk(root):
        for name in subfolders:
            entries[os.path.relpath(os.path.join(folder, name), root)] = "folder"
        for name in files:
            status = os.lstat(os.path.join(folder, name))
            entries[os.path.relpath(os.path.join(folder, name), root)] = (status.st_size, status.st_mtime_ns)
    return entries


def pip(*args, cwd):
    """`python -m pip ARGS` as a user runs it: bytecode written as usual, no package index reachable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    result = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"pip {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n"
                             f"{result.stderr}")
    return result


def python_in(site, code, cwd):
    """Runs code with `site` as a site directory (its .pth files processed) and nothing from the tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-c", f"import site; site.addsitedir({site!r})\n{code}"], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, check=True).stdout


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="calo-py-pip-")
        cls.source = os.path.join(cls.tmp.name, "python")
        shutil.copytree(PACKAGE_ROOT, cls.source, ignore=shutil.ignore_patterns("__pycache__"))
        cls.before = tree(cls.source)
        result = calo("sim", "--model", "llama3-8b", "--cluster", "h100-hgx", "--gpus", 8, "--zero", 3,
                      "--no-op-spans", "--out", os.path.join(cls.tmp.name, "sim"))
        if result.returncode != 0:
            raise AssertionError(f"calo sim failed ({result.returncode}):\n{result.stderr}")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_tree_unchanged(self):
        after = tree(self.source)
        self.assertEqual(sorted(set(after) - set(self.before)), [], "files left in the source tree")
        self.assertEqual(after, self.before)

    def test_install_builds_offline_and_leaves_the_tree_as_it_was(self):
        site = os.path.join(self.tmp.name, "site")
        pip("install", "--no-deps", "--target", site, self.source, cwd=self.tmp.name)
        self.assert_tree_unchanged()
        for name in sorted(os.listdir(os.path.join(self.source, "calo"))):
            with open(os.path.join(self.source, "calo", name), "rb") as a, \
                    open(os.path.join(site, "calo", name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        dist_info = os.path.join(site, f"calo-{calo_package.__version__}.dist-info")
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8") as file:
            metadata = file.read()
        self.assertIn("Name: calo\n", metadata)
        self.assertIn(f"Version: {calo_package.__version__}\n", metadata)
        self.assertIn("Requires-Dist: pandas>=1.3\n", metadata)
        with open(os.path.join(dist_info, "RECORD"), newline="") as file:
            record = list(csv.reader(file))
        for path, digest, size in record:
            if not digest:
                continue
            with open(os.path.join(site, path), "rb") as file:
                data = file.read()
            algorithm, _, expected = digest.partition("=")
            self.assertEqual(algorithm, "sha256")
            self.assertEqual(base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(),
                             expected, path)
            self.assertEqual(int(size), len(data), path)
        # The installed package, not the tree's, reads a real run.
        out = python_in(site, "import calo\nrun = calo.load_run(%r)\nprint(calo.__file__)\n"
                        "print((run.summary['device'] == 'gpu3').sum())" % os.path.join(self.tmp.name, "sim"),
                        cwd=self.tmp.name).split()
        self.assertEqual(out[0], os.path.join(site, "calo", "__init__.py"))
        self.assertEqual(int(out[1]), 6)

    def test_editable_install_reads_the_tree(self):
        site = os.path.join(self.tmp.name, "site-editable")
        pip("install", "--no-deps", "--target", site, "--editable", self.source, cwd=self.tmp.name)
        self.assert_tree_unchanged()
        out = python_in(site, "import calo\nprint(calo.__file__)", cwd=self.tmp.name)
        self.assertEqual(out.strip(), os.path.join(self.source, "calo", "__init__.py"))

    def test_source_distribution_installs(self):
        # The PEP 517 hook as `python -m build --sdist` calls it (pip never builds source distributions).
        dist = os.path.join(self.tmp.name, "dist")
        os.makedirs(dist)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        code = ("import sys; sys.path.insert(0, 'backend'); import calo_backend; "
                "print(calo_backend.build_sdist(%r))")
        sdist = subprocess.run([sys.executable, "-c", code % dist], cwd=self.source, env=env, capture_output=True,
                               text=True, timeout=120, check=True).stdout.strip()
        self.assert_tree_unchanged()
        self.assertEqual(os.listdir(dist), [sdist])
        self.assertEqual(sdist, f"calo-{calo_package.__version__}.tar.gz")
        with tarfile.open(os.path.join(dist, sdist)) as archive:
            names = set(archive.getnames())
        top = f"calo-{calo_package.__version__}"
        for member in ("pyproject.toml", "README.md", "PKG-INFO", "backend/calo_backend.py", "calo/data.py"):
            self.assertIn(f"{top}/{member}", names)
        site = os.path.join(self.tmp.name, "site-sdist")
        pip("install", "--no-deps", "--target", site, os.path.join(dist, sdist), cwd=self.tmp.name)
        out = python_in(site, "import calo\nprint(calo.__file__)", cwd=self.tmp.name)
        self.assertEqual(out.strip(), os.path.join(site, "calo", "__init__.py"))


if __name__ == "__main__":
    unittest.main()
