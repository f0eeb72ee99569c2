"""Shared, session-scoped scenes: the first MJWarp step of a model compiles for tens of seconds."""

import os
import sys

import pytest
import warp as wp

sys.path.insert(0, os.path.dirname(__file__))

import diffsim  # noqa: E402
import models  # noqa: E402

wp.config.log_level = wp.LOG_WARNING

# CPU by default; benchmarks/gpu_check.sh runs the gradient checks with DIFFSIM_TEST_DEVICE=cuda:0
DEVICE = os.environ.get("DIFFSIM_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def cartpole():
  return diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def ball_free():
  return diffsim.Scene.from_xml(models.BALL_FREE, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def rolling_ball():
  return diffsim.Scene.from_xml(models.ROLLING_BALL, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def sliding_box():
  return diffsim.Scene.from_xml(models.SLIDING_BOX, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def constrained():
  return diffsim.Scene.from_xml(models.CONSTRAINED, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def so101():
  return diffsim.Scene.from_xml(models.so101_spec(), nworld=2, device=DEVICE)
