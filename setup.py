"""Packaging is declared in pyproject.toml.  This file only completes its package list: every
``fitcheck`` package is found (``find_packages``), and the two data folders at the top of the
repository, ``hardware_profiles/`` and ``schemas/``, are added as ``fitcheck.hardware_profiles``
and ``fitcheck.schemas`` (pyproject's package-dir maps them; ``packages.find`` cannot see a
package whose folder has another name)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["fitcheck", "fitcheck.*"]), "fitcheck.hardware_profiles", "fitcheck.schemas"])
