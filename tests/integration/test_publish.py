"""The collection as Galaxy, Automation Hub and a docs site take it (docs/release.md).

* ``make build``'s tarball, built with the release's URLs, passes galaxy-importer with Galaxy's defaults and with
  Automation Hub's stricter options, with no warning, and Automation Hub's EDA linters find nothing
  (``scripts/publish-check.sh``); without a repository, Galaxy refuses it.
* The docs site builds with antsibull-docs and Sphinx, warnings as errors (a broken reference fails it), with a
  page for every module, filter, callback, role and guide (``scripts/docs-site.sh``), and its guide pages are what
  ``scripts/docs-rst.sh`` makes of ``docs/*.md``.

The tools come from PyPI into .cache/publish/ (``scripts/publish-venv.sh``: about 2.5 minutes the first time);
then this file takes about 3 minutes on the project's 2-core machine (each import about 35 s, the site about 65 s).
Nothing here listens on a port.
"""

import filecmp
import glob
import json
import os
import subprocess
import tarfile

import pytest
import yaml

from tests.support.paths import REPO

SCRIPTS = os.path.join(REPO, 'scripts')
# The venv (pip, 2.5 minutes) and two imports (35 s each) take several times as long when the other integration
# workers load the machine (CI: over 600 s): each step keeps its own timeout below.
pytestmark = pytest.mark.timeout(2400)
# The release's URLs, as docs/release.md has them (a test value: the tarball stays in tmp_path).
RELEASE = {'COLLECTION_REPOSITORY': 'https://git.example.com/platform/modelops-vllm',
           'COLLECTION_ISSUES': 'https://git.example.com/platform/modelops-vllm/issues'}


def run(args, env=None, timeout=900):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(('COLLECTION_', 'GALAXY_IMPORTER_'))}
    environment.update(env or {})
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope='module')
def publish_venv():
    rc, out = run([os.path.join(SCRIPTS, 'publish-venv.sh')], timeout=1200)
    assert rc == 0, out
    return out.strip().splitlines()[-1]


def build(tmp_path, env):
    rc, out = run([os.path.join(SCRIPTS, 'build-collection.sh')], env=dict(env, BUILD_DIR=str(tmp_path)))
    assert rc == 0, out
    with open(os.path.join(REPO, 'galaxy.yml')) as handle:
        galaxy = yaml.safe_load(handle)
    tarball = tmp_path / ('%s-%s-%s.tar.gz' % (galaxy['namespace'], galaxy['name'], galaxy['version']))
    assert tarball.exists(), out
    return tarball


def test_the_release_tarball_passes_galaxy_and_automation_hub(publish_venv, tmp_path):
    tarball = build(tmp_path, RELEASE)
    with tarfile.open(str(tarball)) as tar:
        info = json.load(tar.extractfile('MANIFEST.json'))['collection_info']
        names = tar.getnames()
    assert info['repository'] == RELEASE['COLLECTION_REPOSITORY']
    assert info['documentation'] == RELEASE['COLLECTION_REPOSITORY']  # the default
    assert info['issues'] == RELEASE['COLLECTION_ISSUES']
    assert not any(name.startswith(('tests/output', '.ansible', 'build/')) for name in names), names
    rc, out = run([os.path.join(SCRIPTS, 'publish-check.sh'), str(tarball)])
    assert rc == 0, out
    assert out.count('Importer processing completed successfully') == 2, out  # Galaxy's and Automation Hub's
    assert 'automation-hub options' in out and 'ruff check --select ALL' in out and 'pylint ' in out, out
    assert 'publish-check: ok' in out, out


def test_galaxy_refuses_a_tarball_that_names_no_repository(publish_venv, tmp_path):
    tarball = build(tmp_path, {})
    rc, out = run([os.path.join(SCRIPTS, 'publish-check.sh'), str(tarball)])
    assert rc != 0 and "'repository' is required" in out, out


@pytest.mark.parametrize('env, why', [
    ({'COLLECTION_REPOSITORY': 'https://user:s3cret@git.example.com/x'}, 'it holds a user or password'),
    ({'COLLECTION_REPOSITORY': 'git@git.example.com:x.git'}, 'not an http(s) URL'),
    ({'COLLECTION_REPOSITORY': 'https://git.example.com/x', 'COLLECTION_ISSUES': 'see the wiki'}, 'not an http(s) URL'),
])
def test_the_build_refuses_a_release_url_that_is_not_one(tmp_path, env, why):
    rc, out = run([os.path.join(SCRIPTS, 'build-collection.sh')], env=dict(env, BUILD_DIR=str(tmp_path)))
    assert rc != 0 and why in out and 's3cret' not in out, out
    assert not glob.glob(str(tmp_path / '*.tar.gz'))


def test_the_docs_site_builds_with_every_plugin_role_and_guide(publish_venv, tmp_path):
    rc, out = run([os.path.join(SCRIPTS, 'docs-site.sh'), str(tmp_path)])
    assert rc == 0, out
    assert 'build succeeded.' in out, out  # sphinx-build -W: no warning, so no broken reference
    html = tmp_path / 'site' / 'build' / 'html'

    def names(kind):
        # every plugin, the internal filters (_*) too: Galaxy shows their documentation (__init__.py is none)
        return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, 'plugins', kind, '*.py'))
                      if not os.path.basename(p).startswith('__'))

    expected = ['%s_module.html' % n for n in names('modules')] + ['%s_filter.html' % n for n in names('filter')]
    expected += ['%s_callback.html' % n for n in names('callback')]
    expected += ['%s_role.html' % os.path.basename(p) for p in glob.glob(os.path.join(REPO, 'roles', '*'))]
    expected += ['docsite/%s.html' % os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, 'docs', '*.md'))]
    missing = [page for page in expected if not (html / page).is_file()]
    assert len(expected) > 30 and missing == [], missing
    # What antsibull-docs writes for a plugin or role whose docs it cannot read fully ("The documentation for the
    # <type> plugin, <name>, was malformed.", "There were some errors parsing the documentation for this role.").
    errors = ('was malformed', 'errors parsing the documentation')
    malformed = [page for page in expected if not page.startswith('docsite/') and
                 any(error in ' '.join((html / page).read_text().split()) for error in errors)]
    assert malformed == [], malformed


def test_the_site_s_guides_are_the_markdown_of_docs(tmp_path):
    rc, out = run([os.path.join(SCRIPTS, 'docs-rst.sh'), str(tmp_path)], timeout=300)
    assert rc == 0, out
    committed = os.path.join(REPO, 'docs', 'docsite', 'rst')
    pages = sorted(os.listdir(str(tmp_path)))
    assert pages == sorted(os.listdir(committed)), 'run scripts/docs-rst.sh'
    match, mismatch, errors = filecmp.cmpfiles(str(tmp_path), committed, pages, shallow=False)
    assert (mismatch, errors) == ([], []), 'docs/docsite/rst is not what scripts/docs-rst.sh makes of docs/*.md: run it'
    with open(os.path.join(REPO, 'docs', 'docsite', 'extra-docs.yml')) as handle:
        listed = [entry for section in yaml.safe_load(handle)['sections'] for entry in section['toctree']]
    assert sorted(listed) == sorted(page[:-len('.rst')] for page in pages), 'extra-docs.yml lists every guide once'
