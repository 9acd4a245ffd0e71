"""Build glue that pyproject.toml cannot express (everything else is in pyproject.toml).

The repository keeps its data folders at the top level (``hardware_profiles/``, ``calibration/``,
``examples/``); the wheel carries them inside the package as ``laddersim/_resources/<folder>/``.
``laddersim/support/resources.py`` is the one module that finds them, in a checkout or an install.
Which files of each folder ship is ``[tool.setuptools.package-data]`` in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

RESOURCE_FOLDERS = ("hardware_profiles", "calibration", "examples")
RESOURCE_PACKAGES = {f"laddersim._resources.{folder}": folder for folder in RESOURCE_FOLDERS}

setup(
    packages=find_namespace_packages(include=["laddersim", "laddersim.*"], exclude=["*.__pycache__"])
    + list(RESOURCE_PACKAGES),
    package_dir=RESOURCE_PACKAGES,
)
