"""choose_platform: compose or kubernetes from team size, GPU count and multi-node training.

Rule (written by hand here from the design brief): fewer than 5 people AND fewer than 8 GPUs -> compose;
more than 10 people OR more than 16 GPUs -> kubernetes; in between -> kubernetes only with frequent
multi-node training.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import jinja2
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.plan import FilterModule
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import choose_platform_with_reason
from conftest import COLLECTIONS


def choose_platform(team_size: object, gpu_count: object, multi_node_training: object) -> str:
    """The rule's platform alone, as the filter returns it."""
    return choose_platform_with_reason(team_size, gpu_count, multi_node_training)[0]


# Every combination on both sides of each threshold, expected values by hand.
# team gpus  multi=false  multi=true
BOUNDARY_GRID = """
4    0     compose      compose
4    7     compose      compose
4    8     compose      kubernetes
4    16    compose      kubernetes
4    17    kubernetes   kubernetes
5    0     compose      kubernetes
5    7     compose      kubernetes
5    8     compose      kubernetes
5    16    compose      kubernetes
5    17    kubernetes   kubernetes
10   0     compose      kubernetes
10   7     compose      kubernetes
10   8     compose      kubernetes
10   16    compose      kubernetes
10   17    kubernetes   kubernetes
11   0     kubernetes   kubernetes
11   7     kubernetes   kubernetes
11   8     kubernetes   kubernetes
11   16    kubernetes   kubernetes
11   17    kubernetes   kubernetes
1    0     compose      compose
1    17    kubernetes   kubernetes
200  0     kubernetes   kubernetes
"""


def _grid() -> list:
    cases = []
    for line in BOUNDARY_GRID.strip().splitlines():
        team, gpus, without, with_multi = line.split()
        cases.append(pytest.param(int(team), int(gpus), False, without, id=f"team{team}-gpus{gpus}-single"))
        cases.append(pytest.param(int(team), int(gpus), True, with_multi, id=f"team{team}-gpus{gpus}-multi"))
    return cases


@pytest.mark.parametrize(("team", "gpus", "multi", "expected"), _grid())
def test_boundaries(team, gpus, multi, expected):
    assert choose_platform(team, gpus, multi) == expected


@pytest.mark.parametrize(("team", "gpus", "multi", "expected"), _grid())
def test_filter_agrees_with_the_rule(team, gpus, multi, expected):
    choose = FilterModule().filters()["choose_platform"]
    assert choose(team, gpu_count=gpus, multi_node_training=multi) == expected


def test_growing_never_goes_back_to_compose():
    """Over a whole grid: more people or more GPUs never turns kubernetes back into compose."""
    for multi in (False, True):
        for team in range(1, 15):
            for gpus in range(22):
                if choose_platform(team, gpus, multi) == "kubernetes":
                    assert choose_platform(team + 1, gpus, multi) == "kubernetes", (team, gpus, multi)
                    assert choose_platform(team, gpus + 1, multi) == "kubernetes", (team, gpus, multi)


def test_reason_names_the_band():
    assert choose_platform_with_reason(4, 7, True) == (
        "compose",
        "a team of 4 (< 5) with 7 GPUs (< 8) is small: Docker Compose",
    )
    assert choose_platform_with_reason(8, 16, True)[1] == (
        "a mid-size setup (team of 8, 16 GPUs) with frequent multi-node training: Kubernetes"
    )
    assert choose_platform_with_reason(3, 17, False)[1].startswith("a team of 3 with 17 GPUs is large")


@pytest.mark.parametrize(
    ("team", "gpus", "multi", "message"),
    [
        (-1, 4, False, r"team_size must be an integer >= 1, got -1$"),
        (0, 4, False, r"team_size must be an integer >= 1, got 0$"),
        (4, -1, False, r"gpu_count must be an integer >= 0, got -1$"),
        ("5", 4, False, r"team_size must be an integer >= 1, got str '5'; set it as a YAML number"),
        (5.0, 4, False, r"team_size must be an integer >= 1, got float 5\.0"),
        (True, 4, False, r"team_size must be an integer >= 1, got bool True"),
        (None, 4, False, r"team_size must be an integer >= 1, got NoneType None"),
        (4, False, False, r"gpu_count must be an integer >= 0, got bool False"),
        (4, "8", False, r"gpu_count must be an integer >= 0, got str '8'"),
        (4, 4, "true", r"multi_node_training must be a real boolean \(true or false\), got str 'true'"),
        (4, 4, 1, r"multi_node_training must be a real boolean \(true or false\), got int 1"),
        (4, 4, None, r"multi_node_training must be a real boolean \(true or false\), got NoneType None"),
    ],
)
def test_bad_input_fails_clearly(team, gpus, multi, message):
    with pytest.raises((TypeError, ValueError), match=message):
        choose_platform(team, gpus, multi)
    with pytest.raises(AnsibleFilterError, match=message):
        FilterModule().filters()["choose_platform"](team, gpu_count=gpus, multi_node_training=multi)


def test_filter_requires_both_keywords():
    choose = FilterModule().filters()["choose_platform"]
    with pytest.raises(AnsibleFilterError, match=r"choose_platform needs gpu_count and multi_node_training"):
        choose(4)
    with pytest.raises(AnsibleFilterError, match=r"choose_platform needs multi_node_training"):
        choose(4, gpu_count=4)


def test_filter_in_plain_jinja():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters.update(FilterModule().filters())
    template = env.from_string("{{ team | choose_platform(gpu_count=gpus, multi_node_training=multi) }}")
    assert template.render(team=8, gpus=12, multi=True) == "kubernetes"
    assert template.render(team=8, gpus=12, multi=False) == "compose"
    literal = env.from_string("{{ 4 | choose_platform(gpu_count=7, multi_node_training=false) }}")
    assert literal.render() == "compose"


TEMPLAR_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.yaml.loader import AnsibleLoader
    from ansible.template import Templar, trust_as_template
    import yaml

    variables = yaml.load(sys.argv[2], Loader=AnsibleLoader)  # tagged values, as from an inventory
    templar = Templar(loader=DataLoader(), variables=variables)
    out = {}
    for key, expression in json.loads(sys.argv[3]).items():
        try:
            out[key] = templar.template(trust_as_template(expression))
        except Exception as exc:
            out[key] = f"ERROR {exc}"
    print(json.dumps(out))
    """
)


def test_through_the_ansible_templar_with_the_fqcn():
    """A real ansible-core Templar resolving gpuops.cluster.choose_platform through the collection loader.

    In a subprocess, so installing the collection finder does not change imports for the other tests.
    """
    inventory = "team: 8\ngpus: 12\nmulti: true\nquoted_team: '8'\nquoted_multi: 'true'\n"
    expressions = {
        "inventory": "{{ team | gpuops.cluster.choose_platform(gpu_count=gpus, multi_node_training=multi) }}",
        "small": "{{ 4 | gpuops.cluster.choose_platform(gpu_count=7, multi_node_training=false) }}",
        "large": "{{ 11 | gpuops.cluster.choose_platform(gpu_count=0, multi_node_training=false) }}",
        "quoted_team": "{{ quoted_team | gpuops.cluster.choose_platform(gpu_count=gpus, multi_node_training=multi) }}",
        "quoted_multi": "{{ team | gpuops.cluster.choose_platform(gpu_count=gpus, multi_node_training=quoted_multi) }}",
    }
    completed = subprocess.run(
        [sys.executable, "-c", TEMPLAR_SCRIPT, str(COLLECTIONS), inventory, json.dumps(expressions)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    out = json.loads(completed.stdout.strip().splitlines()[-1])
    assert (out["inventory"], out["small"], out["large"]) == ("kubernetes", "compose", "kubernetes")
    assert "team_size must be an integer >= 1, got str '8'" in out["quoted_team"]
    assert "multi_node_training must be a real boolean (true or false), got str 'true'" in out["quoted_multi"]
