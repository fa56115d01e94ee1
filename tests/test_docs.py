"""The documentation site stays true: it builds strictly and offline, its flag reference covers every flag
of every agent and env family, every ``python -m sfx...`` command shown parses, and (slow) it renders in a
real headless browser."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BUILD_TIMEOUT_SEC = 120


def _gen_flags():
    spec = importlib.util.spec_from_file_location("sfx_docs_gen_flags", DOCS / "gen_flags.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` into a temporary folder (never into the checkout)."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail("mkdocs / mkdocs-material are missing: pip install -e .[test] (or .[docs]) installs them")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2, not our warning
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SEC)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, f"mkdocs build --strict failed ({seconds:.1f} s):\n{proc.stdout}\n{proc.stderr}"
    print(f"mkdocs build --strict: {seconds:.1f} s")
    return out


def test_site_builds_strictly(site):
    for page in ("index.html", "getting-started/index.html", "agents/appo/index.html", "agents/r2d2/index.html",
                 "agents/sac/index.html", "reference/flags/index.html", "reference/api/index.html"):
        assert (site / page).is_file(), f"{page} missing from the built site"


def test_site_loads_nothing_from_the_internet(site):
    """Offline: no web fonts, scripts or style sheets from elsewhere (links to other sites are fine)."""
    external = re.compile(r"""<(?:script|img|iframe)[^>]*\ssrc=["']?(?:https?:)?//|"""
                          r"""<link[^>]*\shref=["']?(?:https?:)?//[^>]*>""", re.IGNORECASE)
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        for match in external.finditer(text):
            tag = match.group(0)
            if tag.lower().startswith("<link") and not re.search(r"rel=[\"']?(stylesheet|preload|preconnect|icon)",
                                                               tag, re.IGNORECASE):
                continue  # e.g. rel="canonical": not fetched
            pytest.fail(f"{page.relative_to(site)} loads {tag!r} from the internet")
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, page


# --- the flag reference -------------------------------------------------------------------------------

def _option_strings(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def _every_flag() -> dict[str, set[str]]:
    """What --help lists, per parser: the trainer with each agent, with each env family, and the other CLIs."""
    from sfx.agents import registered_agents
    from sfx.cfg import add_eval_args
    from sfx.registries import build_parser
    from sfx.cfg.parsing import _new_parser
    from sfx.export import export_parser
    from sfx_runner.cli import build_parser as runner_parser
    from sfx_tb.cli import build_parser as tb_parser

    gen = _gen_flags()
    flags = {f"--algo={name}": _option_strings(build_parser(None, argv=[f"--algo={name}"]))
             for name in registered_agents()}
    for prefix in gen.family_names():
        parser, env = gen._family_parser(prefix)
        flags[f"--env={env}"] = _option_strings(parser)
    enjoy = _new_parser()
    add_eval_args(enjoy)
    flags["sfx.enjoy"] = _option_strings(enjoy)
    flags["sfx.export"] = _option_strings(export_parser())
    flags["sfx.runner.run"] = _option_strings(runner_parser())
    for mode in ("serve", "plot", "table"):
        flags[f"sfx.tb {mode}"] = _option_strings(tb_parser(mode))
    return flags


def _reference_data() -> dict:
    """Every flag (per parser), agent and env family as a fresh process sees them: the site is built in one,
    while this test process may hold agents and families other tests registered (a bench's env family)."""
    from sfx.agents import registered_agents

    return {"flags": {where: sorted(flags) for where, flags in _every_flag().items()},
            "agents": list(registered_agents()), "families": list(_gen_flags().family_names())}


@functools.lru_cache(maxsize=1)
def _fresh_reference_data() -> dict:
    code = "import json, tests.test_docs as t; print(json.dumps(t._reference_data()))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_flag_reference_covers_every_flag(site):
    html = (site / "reference" / "flags" / "index.html").read_text(encoding="utf-8")
    shown = set(re.findall(r"<code>(--[A-Za-z0-9_-]+)</code>", html))
    every = {where: set(flags) for where, flags in _fresh_reference_data()["flags"].items()}
    missing = {where: sorted(flags - shown) for where, flags in every.items() if flags - shown}
    assert not missing, f"flags missing from the generated reference: {missing}"


def test_every_agent_and_family_has_its_section(site):
    html = (site / "reference" / "flags" / "index.html").read_text(encoding="utf-8")
    data = _fresh_reference_data()
    for name in data["agents"]:
        assert f"<code>--algo={name}</code>" in html, name
    assert "doom_" in data["families"] and "gym_" in data["families"]
    for prefix in data["families"]:
        assert f"<code>{prefix}</code></h3>" in html or f"<code>{prefix}</code><a" in html, prefix
    assert "Not generated" not in html, "an env family could not be loaded while the site was built"


@pytest.mark.parametrize("page, agent", [("appo", "APPO"), ("r2d2", "R2D2"), ("sac", "SAC")])
def test_agent_pages_show_their_generated_flags(site, page, agent):
    gen = _gen_flags()
    _, own, _ = gen._agent_parts(agent)
    html = (site / "agents" / page / "index.html").read_text(encoding="utf-8")
    for action in own:
        assert f"<code>{action.option_strings[-1]}</code>" in html, (page, action.option_strings)


# --- commands shown in the docs parse -------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[A-Za-z]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```",
                   re.DOTALL | re.MULTILINE)
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}  # a ```text block shows output or an error, not a command
SFX_MODULE = re.compile(r"^sfx(\.[a-z_]+)+$")


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _commands() -> list[tuple[str, list[str]]]:
    """(file:line, argv after ``-m``) of every ``python -m sfx...`` / ``torchrun ... -m sfx...`` command in the
    docs' shell code blocks; continuation lines joined, ``#`` comments dropped."""
    found = []
    for path in _doc_files():
        text = path.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            if block.group("lang").lower() not in SHELL_LANGS:
                continue
            first_line = text.count("\n", 0, block.start("body")) + 1
            lines = block.group("body").split("\n")
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i]
                if not re.search(r"-m\s+sfx", line):
                    i += 1
                    continue
                tokens = None
                while tokens is None:
                    while line.rstrip().endswith("\\") and i + 1 < len(lines):
                        i += 1
                        line = line.rstrip()[:-1] + " " + lines[i]
                    try:
                        tokens = shlex.split(line.lstrip("$ "), comments=True)
                    except ValueError:  # a quoted value over several lines (a JSON list)
                        if i + 1 >= len(lines):
                            raise AssertionError(f"{path}: unbalanced quotes in {line!r}") from None
                        i += 1
                        line = line + "\n" + lines[i]
                i += 1
                if "-m" not in tokens:
                    continue
                k = tokens.index("-m")
                launcher = Path(tokens[0]).name if tokens else ""
                if k + 1 < len(tokens) and SFX_MODULE.match(tokens[k + 1]) and \
                        (launcher.startswith("python") or launcher == "torchrun"):
                    where = f"{path.relative_to(ROOT)}:{first_line + start}"
                    found.append((where, tokens[k + 1:]))
    return found


COMMANDS = _commands()


def test_the_docs_show_many_commands():
    assert len(COMMANDS) >= 40, f"only {len(COMMANDS)} python -m sfx commands found in the docs: is the parser broken?"


def _is_placeholder(args: list[str]) -> bool:
    # `srun ... python -m sfx.train ...`, `--ngc_image=...`: shapes of a command, not commands
    return any(a == "..." or a.endswith("=...") for a in args)


def _train_cfg_json(env: str, experiment: str, train_dir: Path) -> None:
    """A trained experiment's cfg.json, as sfx.train writes it (what sfx.enjoy and sfx.export read)."""
    from sfx.registries import parse_args
    from sfx.cfg.cfg_json import cfg_to_dict

    cfg = parse_args([f"--env={env}", f"--experiment={experiment}", f"--train_dir={train_dir}"])
    folder = train_dir / experiment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.json").write_text(json.dumps(cfg_to_dict(cfg)))


def dry_parse(module: str, args: list[str], train_dir: Path) -> None:
    """Parse ``python -m <module> <args>`` with sfx's own parsing functions; run nothing. Raises on a bad line."""
    here = [f"--train_dir={train_dir}"]  # appended: wins over a --train_dir the command names
    if module == "sfx.train":
        from sfx.registries import parse_args

        parse_args(args + here)
    elif module == "sfx.dummy_sampler":
        from sfx.dummy_sampler import parse_sampler_args

        parse_sampler_args(args + here)
    elif module in ("sfx.enjoy", "sfx.export"):
        from sfx.cfg import ConfigError
        from sfx.registries import build_parser, parse_args
        from sfx.cfg.parsing import ArgParser

        rest = args
        if module == "sfx.export":
            from sfx.export import export_parser

            _, rest = export_parser().parse_known_args(args)
        pre = ArgParser(add_help=False)
        pre.add_argument("--env", default=None)
        pre.add_argument("--experiment", default=build_parser(None).get_default("experiment"))
        known, _ = pre.parse_known_args(rest)
        env = known.env or "gym_CartPole-v1"  # sfx.export reads --env from the experiment's cfg.json
        _train_cfg_json(env, known.experiment, train_dir)
        try:
            parse_args(([] if known.env else [f"--env={env}"]) + rest + here, evaluation=True)
        except ConfigError as e:
            if "best" not in str(e):  # --load_checkpoint_kind=best is checked against a checkpoint at load
                raise
    elif module == "sfx.runner.run":
        from sfx_runner.cli import build_parser

        build_parser().parse_args(args)
    elif module == "sfx.tb":
        from sfx_tb.cli import MODES, build_parser

        mode = args[0] if args and args[0] in MODES else "serve"
        parser = build_parser(mode)
        own = args[1:] if args and args[0] == mode else args
        if "--" in own:
            own = own[:own.index("--")]  # the rest goes to TensorBoard (serve) or sfx.enjoy (evaluate)
        try:
            parser.parse_args(own)
        except SystemExit as e:
            raise AssertionError(f"sfx.tb refused {own}") from e
    else:
        pytest.fail(f"python -m {module}: no dry parse for this module; add one to tests/test_docs.py")


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_command_in_the_docs_parses(where, argv, tmp_path, monkeypatch):
    if _is_placeholder(argv):
        pytest.skip(f"{where} shows the shape of a command (`...`)")
    monkeypatch.chdir(ROOT)  # run modules are found as the docs say: from the repository root
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    dry_parse(argv[0], argv[1:], tmp_path / "train_dir")


# --- the site in a real browser (slow) ------------------------------------------------------------------

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output for failures
        pass


@pytest.fixture(scope="module")
def served_site(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _browse(browser: str, url: str, screenshot: Path) -> str:
    """The DOM after the page's scripts ran, and a screenshot, from headless Chromium."""
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--hide-scrollbars", f"--user-data-dir={screenshot.parent / 'profile'}",
              "--window-size=1280,1600"]
    shot = subprocess.run([*common, f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=90)
    assert screenshot.is_file() and screenshot.stat().st_size > 10_000, \
        f"no screenshot of {url}: {shot.stdout}\n{shot.stderr}"
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert dom.returncode == 0 and "<html" in dom.stdout, f"no DOM from {url}: {dom.stderr}"
    return dom.stdout


@pytest.mark.slow
@pytest.mark.parametrize("path, heading, must_show", [
    ("", "sfx", ["Getting started", "Where to go"]),
    ("agents/r2d2/", "R2D2", ["--burn_in", "Comparison with SEED RL"]),
    ("reference/flags/", "Flag reference", ["--algo=SAC", "--batch_size", "doom_"]),
])
def test_site_renders_in_a_headless_browser(served_site, tmp_path_factory, path, heading, must_show):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on PATH: install Debian's chromium (apt-get install -y chromium) to run this test")
    out = tmp_path_factory.mktemp("screenshots")
    name = (path.strip("/").replace("/", "_") or "home") + ".png"
    dom = _browse(browser, served_site + path, out / name)
    print(f"screenshot: {out / name}")
    h1 = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.DOTALL)
    assert h1 and heading in re.sub(r"<[^>]+>", "", h1.group(1)), f"{path}: no <h1> with {heading!r}"
    assert re.search(r"<h2[^>]*>", dom), f"{path}: no section headings"
    assert 'class="md-nav' in dom and "md-sidebar--primary" in dom, f"{path}: the navigation is missing"
    for label in ("Getting started", "Concepts", "Agents", "Environments", "Benchmarks", "Reference"):
        assert f"{label}" in dom, f"{path}: navigation entry {label!r} missing"
    for text in must_show:
        assert text in dom, f"{path}: {text!r} not shown"
    # the theme's own script ran (Material marks the document once its bundle starts)
    assert "md-search" in dom


# --- every page fits a desktop and a phone screen (slow: a real browser) --------------------------------

# Run by every page once it has loaded (injected by _ProbingHandler): what sticks out of the content column
# (unless a box that scrolls inside the column holds it), flag names and marked words of code broken over
# two lines, images that did not load, in-page links to no anchor. Posted to the host page as JSON.
LAYOUT_PROBE = r"""
window.addEventListener("load", () => {
  const vw = document.documentElement.clientWidth;
  const column = document.querySelector(".md-content") || document.body;
  const edge = Math.min(vw, column.getBoundingClientRect().right);
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if (["auto", "scroll", "hidden", "clip"].includes(ox) && p.getBoundingClientRect().right <= edge + 1) return true;
    }
    return false;
  };
  const say = (el) => el.tagName.toLowerCase() + ": " + (el.textContent || "").trim().slice(0, 80);
  const out = {viewport: vw, wide: [], broken: [], images: [], links: []};
  for (const el of column.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > edge + 1 && !scrolls(el)) out.wide.push(say(el) + " (right edge " + Math.round(r.right) + " px)");
  }
  for (const c of document.querySelectorAll(".md-typeset code, .md-typeset code > span.sfx-word")) {
    const text = c.textContent.trim();
    if ((/^--\w+$/.test(text) || c.classList.contains("sfx-word")) && c.getClientRects().length > 1) out.broken.push(text);
  }
  for (const img of column.querySelectorAll("img")) {
    if (!img.complete || img.naturalWidth === 0) out.images.push(img.getAttribute("src"));
  }
  for (const a of column.querySelectorAll("a[href^='#']")) {
    const id = decodeURIComponent(a.getAttribute("href").slice(1));
    if (id && !document.getElementById(id)) out.links.push(id);
  }
  window.parent.postMessage(JSON.stringify(out), "*");
});
"""
PROBE_PREFIX = "/__probe__/"
# Chromium's headless window is at least 500 px wide: a phone's width is the width of an iframe
HOST_PAGE = ('<html><body style="margin:0"><iframe src="/{page}" style="width:{width}px;height:900px;border:0">'
             '</iframe><script>addEventListener("message", e => {{ const p = document.createElement("pre"); '
             'p.id = "layout-probe"; p.textContent = e.data; document.body.appendChild(p); }});</script></body></html>')
WIDTHS = (1400, 390)


def _pages() -> list[str]:
    """The site path of every page (``agents/appo/``; the home page is ``""``)."""
    pages = []
    for md in sorted(DOCS.rglob("*.md")):
        parts = md.relative_to(DOCS).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "index" else parts
        pages.append("".join(f"{p}/" for p in parts))
    return pages


class _ProbingHandler(_QuietHandler):
    """The built site with LAYOUT_PROBE in every page, and ``/__probe__/<width>/<page>``: a host page that
    shows the page in an iframe of that width and writes what the probe posts into its own DOM."""

    def send_head(self):
        if self.path.startswith(PROBE_PREFIX):
            width, page = self.path[len(PROBE_PREFIX):].split("/", 1)
            return self._answer(HOST_PAGE.format(page=page, width=int(width)))
        path = Path(self.translate_path(self.path))
        path = path / "index.html" if path.is_dir() else path
        if path.suffix == ".html" and path.is_file():
            text = path.read_text(encoding="utf-8")
            return self._answer(text.replace("</body>", f"<script>{LAYOUT_PROBE}</script></body>"))
        return super().send_head()

    def _answer(self, text: str):
        import io

        body = text.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


@pytest.fixture(scope="module")
def probed_site(site):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_ProbingHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}{PROBE_PREFIX}"
    server.shutdown()
    server.server_close()


def test_the_layout_probe_finds_every_page():
    pages = _pages()
    assert "" in pages and "getting-started/" in pages and "reference/flags/" in pages and len(pages) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", _pages())
def test_every_page_fits_desktop_and_phone_widths(probed_site, tmp_path, page, width):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on PATH: install Debian's chromium (scripts/install_chromium.sh) to run this test")
    # the virtual time budget lets the page load (and the theme's scripts run) before the DOM is dumped
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
                          "--window-size=1500,1000", "--virtual-time-budget=5000", "--dump-dom",
                          f"{probed_site}{width}/{page}"], capture_output=True, text=True, timeout=90)
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', dom.stdout, re.DOTALL)
    assert found, f"{page or 'home'} at {width} px: the page never finished loading ({dom.stderr[-500:]})"
    import html

    report = json.loads(html.unescape(found.group(1)))
    assert report["viewport"] == width
    where = f"{page or 'home'} at {width} px"
    assert not report["wide"], f"{where}: sticks out of the content column: {report['wide'][:5]}"
    assert not report["broken"], f"{where}: code broken over two lines: {report['broken'][:10]}"
    assert not report["images"], f"{where}: images that do not load: {report['images']}"
    assert not report["links"], f"{where}: in-page links to no anchor: {report['links']}"



# --- pages short enough to read; the results page true to its numbers ------------------------------------

def _docs_module(name: str):
    spec = importlib.util.spec_from_file_location(f"sfx_docs_{name}", DOCS / "figures" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_word_count_reads_prose_not_code():
    wc = _docs_module("wordcount")
    page = ("# Title here\n\nOne two three [four](somewhere.md#five) `six`.\n\n| a | b |\n| --- | --- |\n| seven | 8 |\n\n"
            "```bash\npython -m sfx.train --env=a --experiment=b\n```\n\n<!-- not read -->\n")
    # Title, here, One, two, three, [four], `six`., and the table's a, b, seven, 8: not the link target, the code
    # block or the comment
    assert wc.words(page) == 11
    assert wc.too_long({"benchmarks.md": 2600, "appendix/benchmarks-log.md": 9000, "faq.md": 100}) == {"benchmarks.md": 2600}


def test_no_page_outside_the_appendix_is_over_the_word_limit():
    """Each page leads with what its reader came for; dated measurement logs live in docs/appendix/."""
    wc = _docs_module("wordcount")
    counts = wc.page_words(DOCS)
    assert any(page.startswith("appendix/") for page in counts), "no appendix pages: is the word count's path right?"
    over = wc.too_long(counts)
    assert not over, (f"pages over {wc.WORD_LIMIT} words (move measurement logs to docs/appendix/<topic>.md, dated; "
                      f"`python docs/figures/wordcount.py` counts them): {over}")


def _figure_data() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted((DOCS / "figures" / "data").glob("*.json"))}


def test_the_results_page_shows_every_figure_with_its_date_and_commands():
    results = (DOCS / "results.md").read_text(encoding="utf-8")
    data = _figure_data()
    shown = re.findall(r"!\[[^\]]*\]\(figures/([a-z0-9_]+)\.svg\)", results)
    assert len(set(shown)) >= 6, f"the results page shows {len(set(shown))} figures; the issue asks for six or more"
    assert set(shown) == set(data), f"figures on the page without data, or data without a figure: {set(shown) ^ set(data)}"
    for name, figure in data.items():
        at = results.index(f"(figures/{name}.svg)")
        section = results[at:results.find("![", at + 1) if "![" in results[at + 1:] else len(results)]
        for date in re.findall(r"\d{4}-\d{2}-\d{2}", figure["date"]):
            assert date in section, f"{name}: its date {date} is not given under the figure"
        for command in figure["commands"]:
            assert command in section, f"{name}: the command {command!r} is not shown under the figure"


def _numbers(value, key: str = "") -> list[float]:
    """The measured numbers of a figure's data (not seeds, levels or labels)."""
    if key in ("seeds", "seed", "levels", "bar", "env_steps", "threshold", "frames"):
        return []
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, k)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v, key)]
    return []


def _spellings(n: float) -> set[str]:
    """How a measured number is written in the docs' tables and prose."""
    out = {repr(n), f"{n:,}"}
    if isinstance(n, float):
        out |= {f"{n:.1f}", f"{n:,.1f}", f"{n:,.2f}"}
    if float(n).is_integer():
        i = int(n)
        out |= {str(i), f"{i:,}"}
        if i % 1000 == 0 and i:
            out |= {f"{i // 1000}k", f"{i // 1000}K"}
    return out


@pytest.mark.parametrize("name", sorted(_figure_data()))
def test_every_number_drawn_is_recorded_in_its_source_page(name):
    """A figure draws only what a dated measurement recorded: each of its numbers appears in the page it cites."""
    figure = _figure_data()[name]
    files = figure["source_files"]
    if not files:  # copied from a benchmark's own JSON: its summary must agree with its curve
        assert "bench/results/" in figure["source"], f"{name}: no source page and no benchmark result named"
        for run in figure["runs"].values():
            curve, summary = run["curve"], run["summary"]
            assert max(curve["reward"]) == pytest.approx(summary["max_reward"], abs=1e-3)
            first = next(f for f, r in zip(curve["frames"], curve["reward"]) if r >= figure["threshold"])
            assert first == summary["frames_to_threshold"]
        return
    text = " ".join((ROOT / f).read_text(encoding="utf-8") for f in files)
    words = set(re.findall(r"-?[\d,]*\d(?:\.\d+)?[kKM]?", text))
    missing = [n for n in _numbers({k: v for k, v in figure.items() if k not in ("figure", "date", "commands")})
               if not _spellings(n) & words]
    assert not missing, f"{name}: numbers not found in {files}: {missing}"


def test_the_figures_are_drawn_from_their_data_and_small(tmp_path):
    make = _docs_module("make_figures")
    written = make.make(tmp_path)
    assert {p.stem for p in written} == set(_figure_data())
    for path in written:
        committed = DOCS / "figures" / path.name
        assert committed.is_file(), f"{path.name}: run `python docs/figures/make_figures.py` and commit it"
        assert committed.read_bytes() == path.read_bytes(), \
            f"docs/figures/{path.name} is not what its data draws: run `python docs/figures/make_figures.py`"
        assert path.stat().st_size < 60_000, f"{path.name}: {path.stat().st_size} bytes, keep figures small"


def test_the_site_has_its_logo_diagram_and_results(site):
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'src="assets/logo.svg"' in home or 'src="./assets/logo.svg"' in home, "the header has no logo"
    assert re.search(r'rel="icon" href="(\./)?assets/logo\.svg"', home), "the favicon is not the logo"
    assert (site / "assets" / "logo.svg").stat().st_size < 5_000
    assert 'href="results/"' in home, "the home page does not link the results"
    concepts = (site / "concepts" / "index.html").read_text(encoding="utf-8")
    assert "figures/architecture.svg" in concepts and (site / "figures" / "architecture.svg").is_file()
    svg = (DOCS / "figures" / "architecture.svg").read_text(encoding="utf-8")
    assert "viewBox=" in svg and "http://www.w3.org/2000/svg" in svg and not re.search(r"(href|src)=\"https?:", svg)
    nav = (site / "results" / "index.html").read_text(encoding="utf-8")
    for page in ("appendix/throughput-log/", "appendix/learning-log/", "appendix/appo-log/", "appendix/sac-log/", "appendix/engine-log/"):
        assert page in nav, f"{page} is not in the navigation"


def test_every_image_in_the_docs_is_small():
    """Pictures load at once on a phone: a few tens of KB each (SVG text stays text; PNG plots with a palette)."""
    images = [p for ext in ("png", "jpg", "jpeg", "gif", "svg") for p in DOCS.rglob(f"*.{ext}")]
    assert len(images) >= 10
    big = {str(p.relative_to(DOCS)): p.stat().st_size for p in images if p.stat().st_size > 60_000}
    assert not big, f"images over 60 KB (a PNG plot: quantize it to a palette; a figure: draw it as SVG): {big}"
