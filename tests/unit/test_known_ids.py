"""Known job ids, computed on main before the canonical-JSON module existed.

A job id is the dedup handle of every stored job: if one of these moves, a
resubmit after an upgrade no longer finds the job it is a copy of. A change
here must be deliberate, never a side effect of tidying the JSON code.
"""

from __future__ import annotations

import pytest

from nw import plans
from nw.jobs.core import ids

PROJECT, KIND = "proj-1", "render"


@pytest.mark.parametrize(
    ("params", "job_id"),
    [
        ({"prompt": "a tiger"}, "6ae1d00cac759d46cc077dec4257b168427ede3e84130deac6ebcc6618002228"),
        (
            {"prompt": "un tigre à l'aube", "seed": 7, "strength": 0.5, "n": 2.0},
            "13ddb378205f70041dcc082de810c7abd145968ca1c9c4fce2d82cbc938d327e",
        ),
        (
            {"nested": {"list": [1, 2.5, None, True, "ß"], "deep": {"x": -0.0}}, "title": "日本"},
            "3b7287144fcc71c5e29ade9ceedf85d4c69785d029f970202c098b7c096ea788",
        ),
        ({}, "144020e284a83ab8fab05fd8f8191ac5ccb329d6e9cede72aa7089201f505094"),
        (
            {"big": 2**60, "tiny": 1e-300, "neg": -3},
            "5c34514a86078b035b5722c27ffe7de6f6cce5c967000e2a4d7aeac694ac7e2b",
        ),
    ],
)
def test_a_params_job_id_never_moves(params, job_id):
    assert ids.job_id_for(PROJECT, KIND, ids.params_hash(params)) == job_id


def test_an_explicit_key_job_id_never_moves():
    expected = "401eb429f468e09acf4dc2e391899dc1c36090538afea70cce8165aa560a2fb9"
    assert ids.job_id_for(PROJECT, KIND, "my-key") == expected


def test_a_vendor_neutral_plan_job_id_never_moves():
    # A plan carrying fields falaw does not know keeps nw's own identity contract.
    plan = {
        "calls": [
            {
                "tool": "t",
                "application": "m",
                "arguments": {"p": "é", "n": 1.0},
                "output_kind": "image",
                "provider": "x",
            }
        ],
        "title": "t",
    }
    assert plans.plan_hash(plan) == (
        "4a6ed73f6357a9b41df20c89af5048899eee6bd57f0ff5ed7f126149cd24ae6f"
    )
    assert ids.job_id_for(PROJECT, KIND, plans.plan_hash(plan)) == (
        "bd257f637717348ee3339a65152b29ebfda682d36b620f97c48998eec98aa434"
    )
