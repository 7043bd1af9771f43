"""Packaging: every top-level folder of the tree installs under the one import name `cqlstream`.

The folders stay where they are (cql/, engine/, server/, ...) and are mapped to cqlstream.cql,
cqlstream.engine, ... so site-packages gets only `cqlstream`. Packages are discovered, not listed,
so a new sub-package cannot be forgotten. Metadata lives in pyproject.toml.
"""

from setuptools import find_packages, setup

# top-level folder -> its name under cqlstream (the face package cqlstream/ is the root itself)
LAYERS = ["cql", "engine", "io", "server", "spark_bridge"]


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = (
        ["cqlstream", "cqlstream.grammar", "cqlstream.demo"],
        {"cqlstream": "cqlstream", "cqlstream.grammar": "grammar", "cqlstream.demo": "demo"},
    )
    for top in LAYERS:
        for pkg in find_packages(where=".", include=[top, f"{top}.*"]):
            packages.append(f"cqlstream.{pkg}")
            package_dir[f"cqlstream.{pkg}"] = pkg.replace(".", "/")
    for pkg in find_packages(where="cqlstream"):
        packages.append(f"cqlstream.{pkg}")
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
