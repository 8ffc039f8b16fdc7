"""The built-in objectives through their conformance kit (cast_core.testing.ObjectiveConformance).

The kit's two subprocess scenarios (SIGKILL + resume, two processes) take ~20 s each: they run by
default for nft (its old policy is the state a resume must restore); the rest are slow tests, and
the clipped objective's are the scenarios test_distributed.py already runs by default."""

import pytest

from cast_core.testing import ObjectiveConformance


class TestSDEClipped(ObjectiveConformance):
    objective = "sde-clipped"

    @pytest.mark.slow
    def test_sigkill_then_resume_is_bit_identical(self, tmp_path):
        super().test_sigkill_then_resume_is_bit_identical(tmp_path)

    @pytest.mark.slow
    def test_two_processes_train_as_one(self, tmp_path):
        super().test_two_processes_train_as_one(tmp_path)


class TestNFT(ObjectiveConformance):
    objective = "nft"


class TestAWM(ObjectiveConformance):
    objective = "awm"

    @pytest.mark.slow
    def test_sigkill_then_resume_is_bit_identical(self, tmp_path):
        super().test_sigkill_then_resume_is_bit_identical(tmp_path)

    @pytest.mark.slow
    def test_two_processes_train_as_one(self, tmp_path):
        super().test_two_processes_train_as_one(tmp_path)
