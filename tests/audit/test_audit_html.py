"""`audit -o html`: the numbers the page is built from, and the page itself in headless
Chromium: it loads with no console error and fetches nothing, the charts are drawn, the table
filters and sorts, and object names written by anyone stay text.

The browser tests need Debian's chromium and chromium-driver (`make test-packages`) and selenium:
without them they skip with the reason, except in CI (CI set), where they fail.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import headless_chromium
from tests.support.paths import ROOT, SNAPSHOT
from webhook.audit.html import (
    embed_json,
    gpu_bars,
    object_gpus,
    report_data,
    rule_counts,
    write_html,
)
from webhook.audit.manifests import read_sources
from webhook.audit.run import AuditResult, Summary, audit
from webhook.engine.compiled import CompiledRuleSet, compile_rules
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

# Three namespaces: inference asks 3 x 2 GPUs, ml-team 1 + 0.5 (the half is denied), web none.
TEAM = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: serve, namespace: inference}
spec:
  replicas: 3
  selector: {matchLabels: {app: serve}}
  template:
    metadata: {labels: {app: serve}}
    spec:
      containers:
        - name: server
          image: vllm
          resources: {limits: {nvidia.com/gpu: 2, memory: 40Gi}}
          readinessProbe: {tcpSocket: {port: 8000}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml-team}
spec:
  containers:
    - {name: t, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}
---
apiVersion: v1
kind: Pod
metadata: {name: half, namespace: ml-team}
spec:
  containers:
    - {name: h, image: cuda, resources: {limits: {nvidia.com/gpu: "0.5", memory: 8Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: web}
spec:
  containers: [{name: nginx, image: nginx}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: web}
"""

# Markup and script in every place a manifest's author controls and the page shows.
HOSTILE_NAME = "</script><img src=x onerror=alert(1)>"
HOSTILE_NS = "<svg onload=alert(2)>"
HOSTILE_CONTAINER = "<img src=y onerror=alert(3)><!--"
HOSTILE = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: '{HOSTILE_NAME}', namespace: '{HOSTILE_NS}'}}
spec:
  containers:
    - name: '{HOSTILE_CONTAINER}'
      image: cuda
      resources: {{limits: {{nvidia.com/gpu: "0.5"}}}}
"""


@pytest.fixture(scope="module")
def rules() -> CompiledRuleSet:
    return compile_rules(load_rules(ROOT / "rules"))


def _write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("manifests")
    return [_write(folder, "team.yaml", TEAM), _write(folder, "broken.yaml", "a: [1, 2\n")]


def _results(paths: list[str], rules: CompiledRuleSet, facts: Any = None) -> list[Any]:
    return list(audit(read_sources(paths), rules, source=facts))


def _audited(paths: list[str], rules: CompiledRuleSet, facts: Any = None) -> list[AuditResult]:
    return [r for r in _results(paths, rules, facts) if isinstance(r, AuditResult)]


def _page(paths: list[str], rules: CompiledRuleSet, facts: Any = None) -> str:
    out = io.StringIO()
    unchecked = () if facts is not None else rules.base.cluster_rules
    write_html(
        _results(paths, rules, facts), Summary(), out, rules=rules, unchecked=unchecked, facts=facts
    )
    return out.getvalue()


def _embedded(page: str) -> dict[str, Any]:
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    assert found is not None
    return dict(json.loads(found.group(1)))


# ---- the data, in-process ------------------------------------------------------------------


def test_an_object_asks_for_its_gpus_times_its_replicas(
    inputs: list[str], rules: CompiledRuleSet
) -> None:
    gpus = {r.name: object_gpus(r, rules) for r in _audited(inputs, rules)}
    assert gpus == {
        "serve": {"nvidia.com/gpu": Fraction(6)},
        "trainer": {"nvidia.com/gpu": Fraction(1)},
        "half": {"nvidia.com/gpu": Fraction(1, 2)},
        "web": {},
    }


def test_without_cluster_facts_the_chart_shows_requests_and_no_quota(
    inputs: list[str], rules: CompiledRuleSet
) -> None:
    bars = gpu_bars(_audited(inputs, rules), rules, None)
    assert [(b.namespace, b.resource, b.in_use, b.requested, b.quota) for b in bars] == [
        ("inference", "nvidia.com/gpu", 0, 6, None),
        ("ml-team", "nvidia.com/gpu", 0, Fraction(3, 2), None),
    ]  # web asks no GPU and has no GPU quota: no bar


def test_with_cluster_facts_use_and_quota_come_from_them(
    inputs: list[str], rules: CompiledRuleSet
) -> None:
    from webhook.audit.cluster import summarize

    facts = load_snapshot(SNAPSHOT)
    results = _audited(inputs, rules, facts)
    in_use = summarize(results, facts, rules)
    # The snapshot: ml-team runs 8 + 4 GPUs (its Succeeded pod holds none) under a quota of 16;
    # inference runs 3 under 8.
    manifests = {
        (b.namespace, b.in_use, b.requested, b.quota) for b in gpu_bars(results, rules, in_use)
    }
    assert manifests == {("inference", 3, 6, 8), ("ml-team", 12, Fraction(3, 2), 16)}
    live = gpu_bars(results, rules, in_use, add_requests=False)
    assert {(b.namespace, b.in_use, b.requested, b.quota) for b in live} == {
        ("inference", 3, 0, 8),
        ("ml-team", 12, 0, 16),
    }


def test_every_active_rule_is_counted_and_unchecked_ones_say_so(
    inputs: list[str], rules: CompiledRuleSet
) -> None:
    results = _audited(inputs, rules)
    counts = rule_counts(results, rules.base.active_rules, rules.base.cluster_rules)
    by_rule = {c["rule"]: c for c in counts}
    assert set(by_rule) == set(rules.base.active_rules)
    assert by_rule["gpu-whole-quantity"]["deny"] == 1  # the half GPU
    assert by_rule["gpu-whole-quantity"]["objects"] == 1
    assert {r for r, c in by_rule.items() if not c["checked"]} == set(rules.base.cluster_rules)
    ranks = [(c["deny"], c["warn"], c["audit"]) for c in counts]
    assert ranks == sorted(ranks, reverse=True)  # denials first, as --summary lists rules
    assert counts[0]["rule"] == "gpu-whole-quantity"
    for r in results:
        for f in r.findings():
            assert by_rule[f["rule"]]["checked"]


def test_the_report_counts_like_the_other_formats(
    inputs: list[str], rules: CompiledRuleSet
) -> None:
    """The caller turns the summary into the exit code: it must be filled."""
    summary = Summary()
    data = report_data(_results(inputs, rules), summary, rules)
    assert (summary.objects, summary.denied, summary.skipped, summary.errors) == (4, 1, 1, 1)
    assert data["summary"]["denied"] == 1
    assert [o["name"] for o in data["objects"]] == ["serve", "trainer", "half", "web"]
    assert "broken.yaml" in data["errors"][0]["source"]
    serve = data["objects"][0]
    assert serve["patch"] and any(line.startswith("+") for line in serve["diff"])
    trainer = data["objects"][1]  # where it starts, and the line of its container's limits
    assert trainer["line"] == 16
    assert {f["location"]["line"] for f in trainer["findings"]} == {21}
    assert data["errors"][0]["line"] == 2


@pytest.mark.parametrize(
    "text", [HOSTILE_NAME, "</SCRIPT >", "<!-- <script>", "a & b", "\u2028\u2029", 'q"\\']
)
def test_embedded_json_cannot_end_its_script_element_and_reads_back(text: str) -> None:
    embedded = embed_json({"name": text, "list": [text]})
    assert not set("<>&\u2028\u2029") & set(embedded)
    assert json.loads(embedded) == {"name": text, "list": [text]}


def test_the_page_refers_to_nothing_outside_itself(
    inputs: list[str], rules: CompiledRuleSet
) -> None:
    page = _page(inputs, rules)
    assert not re.search(
        r"\b(src|href|action)\s*=|url\(|@import|https?://(?!www\.w3\.org/2000/svg)", page
    )
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None and "default-src 'none'" in policy.group(1)
    assert "'unsafe-inline'" not in policy.group(1)


def test_hostile_names_never_reach_the_page_as_markup(
    tmp_path: Path, rules: CompiledRuleSet
) -> None:
    page = _page([_write(tmp_path, "hostile.yaml", HOSTILE)], rules)
    assert len(re.findall(r"</script", page, re.I)) == 2  # the data's and the script's own
    assert "<img" not in page and "<svg onload" not in page
    assert _embedded(page)["objects"][0]["name"] == HOSTILE_NAME


# ---- the page, in headless Chromium --------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(1280, 1000, console=True)
    try:
        yield driver
    finally:
        driver.quit()


def _open(browser: Any, folder: Path, page: str) -> None:
    """Load the page and fail on any console error or alert it raised."""
    from selenium.common.exceptions import NoAlertPresentException

    path = folder / "report.html"
    path.write_text(page)
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(path.as_uri())
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []


def _visible_names(browser: Any) -> list[str]:
    return list(
        browser.execute_script(
            "return [...document.querySelectorAll('#objects tbody.obj:not([hidden]) td.name')]"
            ".map(td => td.textContent)"
        )
    )


def _js(browser: Any, script: str) -> Any:
    return browser.execute_script("return " + script)


def test_the_page_loads_clean_and_fetches_nothing(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    _open(browser, tmp_path, _page(inputs, rules))
    assert browser.title == "gpu-admission audit"
    assert _js(browser, "performance.getEntriesByType('resource').length") == 0
    assert _js(browser, "document.querySelector('[data-key=denied] strong').textContent") == "1"
    assert _js(browser, "document.getElementById('errors').hidden") is False
    assert "broken.yaml" in _js(browser, "document.getElementById('error-list').textContent")


def test_the_usage_chart_draws_a_bar_per_namespace_without_quota_when_unknown(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    _open(browser, tmp_path, _page(inputs, rules))
    bars = _js(
        browser, "[...document.querySelectorAll('#usage svg g.bar')].map(g => g.dataset.namespace)"
    )
    assert bars == ["inference", "ml-team"]
    assert _js(browser, "document.querySelectorAll('#usage svg rect.requested').length") == 2
    assert _js(browser, "document.querySelectorAll('#usage svg line.quota').length") == 0
    assert "Quota unknown" in _js(browser, "document.getElementById('usage-note').textContent")
    widths = _js(
        browser,
        "[...document.querySelectorAll('#usage svg rect.requested')].map(r => r.getBBox().width)",
    )
    assert widths[0] == pytest.approx(widths[1] * 4)  # 6 GPUs against 1.5


def test_the_usage_chart_marks_quota_and_overuse_with_cluster_facts(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    _open(browser, tmp_path, _page(inputs, rules, load_snapshot(SNAPSHOT)))
    assert _js(browser, "document.querySelectorAll('#usage svg line.quota').length") == 2
    over = _js(
        browser, "[...document.querySelectorAll('#usage g.bar.over')].map(g => g.dataset.namespace)"
    )
    assert over == ["inference"]  # 3 in use + 6 asked > 8
    text = _js(browser, "document.querySelector('#usage g.bar.over text.value').textContent")
    assert text == "3 in use + 6 asked of 8 · over quota"


def test_the_rules_chart_lists_every_rule_and_filters_the_table_on_click(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    _open(browser, tmp_path, _page(inputs, rules))
    drawn = _js(browser, "[...document.querySelectorAll('#rules g.rule')].map(g => g.dataset.rule)")
    assert sorted(drawn) == sorted(rules.base.active_rules)
    assert _js(browser, "document.querySelectorAll('#rules g.rule rect.deny').length") == 1
    browser.find_element("css selector", "#rules g.rule[data-rule='gpu-whole-quantity']").click()
    assert _visible_names(browser) == ["half"]


def test_typing_in_the_filter_shows_only_matching_objects(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    _open(browser, tmp_path, _page(inputs, rules))
    assert sorted(_visible_names(browser)) == ["half", "serve", "trainer", "web"]
    box = browser.find_element("id", "filter")
    box.send_keys("ml-team")
    assert sorted(_visible_names(browser)) == ["half", "trainer"]
    box.send_keys(" TRAIN")  # every word must match, in any case
    assert _visible_names(browser) == ["trainer"]
    assert _js(browser, "document.getElementById('shown').textContent") == "1 of 4 objects shown"
    box.clear()
    box.send_keys("memory-limit")  # a finding's rule or message matches too
    assert "trainer" in _visible_names(browser) and "web" not in _visible_names(browser)
    box.clear()
    box.send_keys("no-such-thing")
    assert _visible_names(browser) == []


def test_the_verdict_filter_and_the_filter_box_combine(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    from selenium.webdriver.support.ui import Select

    _open(browser, tmp_path, _page(inputs, rules))
    Select(browser.find_element("id", "verdict")).select_by_value("denied")
    assert _visible_names(browser) == ["half"]
    browser.find_element("id", "filter").send_keys("inference")
    assert _visible_names(browser) == []


def test_clicking_a_header_sorts_and_again_reverses(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    _open(browser, tmp_path, _page(inputs, rules))
    assert _visible_names(browser)[0] == "half"  # denied first by default
    header = browser.find_element("css selector", "#objects th[data-key=name] button")
    header.click()
    assert _visible_names(browser) == ["half", "serve", "trainer", "web"]
    assert (
        _js(browser, "document.querySelector('th[data-key=name]').getAttribute('aria-sort')")
        == "ascending"
    )
    header.click()
    assert _visible_names(browser) == ["web", "trainer", "serve", "half"]
    browser.find_element("css selector", "#objects th[data-key=gpus] button").click()
    assert _visible_names(browser) == ["web", "half", "trainer", "serve"]


def test_a_row_opens_to_its_findings_and_patch(
    browser: Any, tmp_path: Path, inputs: list[str], rules: CompiledRuleSet
) -> None:
    page = _page(inputs, rules)
    trainer = next(o for o in _embedded(page)["objects"] if o["name"] == "trainer")
    assert trainer["findings"] and trainer["patch"]
    _open(browser, tmp_path, page)
    row = "#objects tr.details "
    assert _js(browser, "document.querySelectorAll('#objects tr.details').length") == 0
    browser.find_element(
        "xpath",
        "//table[@id='objects']//tr[contains(@class,'main')][td[@class='name' and .='trainer']]",
    ).click()
    cells = _js(
        browser,
        f"[...document.querySelectorAll('{row}table.findings tbody tr')]"
        ".map(tr => [...tr.cells].map(td => td.textContent))",
    )
    assert cells == [
        [f["verdict"], f["rule"], f["mode"], f["path"], str(f["location"]["line"]), f["message"]]
        for f in trainer["findings"]
    ]
    shown = _js(browser, f"document.querySelector('{row}pre.json-patch').textContent")
    assert json.loads(shown) == trainer["patch"]
    diff = _js(browser, f"[...document.querySelectorAll('{row}pre.diff span.add')].length")
    assert diff == sum(1 for line in trainer["diff"] if line.startswith("+"))
    assert diff > 0


def test_hostile_object_names_are_shown_as_text_and_run_nothing(
    browser: Any, tmp_path: Path, rules: CompiledRuleSet
) -> None:
    page = _page([_write(tmp_path, "hostile.yaml", HOSTILE)], rules)
    _open(browser, tmp_path, page)  # no alert, no console error (a blocked script logs one)
    assert _js(browser, "document.querySelectorAll('img, [onerror], [onload]').length") == 0
    assert _visible_names(browser) == [HOSTILE_NAME]
    assert _js(browser, "document.querySelector('#usage g.bar').dataset.namespace") == HOSTILE_NS
    assert HOSTILE_NS in _js(browser, "document.querySelector('#usage g.bar text.ns').textContent")
    browser.find_element("css selector", "#objects tr.main").click()
    messages = _js(browser, "document.querySelector('#objects table.findings').textContent")
    assert HOSTILE_CONTAINER in messages
    assert _js(browser, "document.querySelectorAll('img').length") == 0
