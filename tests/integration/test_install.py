"""The README's install instructions, run as written.

Each block runs in a clean copy of the collection (``scripts/stage-collection.sh``: what git tracks
and what it does not ignore), with ``HOME`` in a temporary directory (so ``~/.ansible/collections``
and ``~/ansible`` are the test's own) and no ``ANSIBLE_*`` variable: the way a new user runs them.
The AWX project's ``collections/requirements.yml`` examples are installed with ``ansible-galaxy
collection install -r`` from a project directory, the git one from a git repository of that copy.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.support.paths import REPO

EXAMPLE = re.compile(r'<!-- example: ([\w-]+) -->\s*\n```[\w-]*\n(.*?)\n```', re.S)
VENV_BIN = os.path.join(sys.prefix, 'bin')  # the venv the tests run in (make's VENV)


def readme_examples():
    with open(os.path.join(REPO, 'README.md')) as handle:
        return dict(EXAMPLE.findall(handle.read()))


def version():
    with open(os.path.join(REPO, 'galaxy.yml')) as handle:
        return yaml.safe_load(handle)['version']


def user_env(home):
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(('ANSIBLE_', 'PYTEST_')))
    env.update(HOME=str(home), PATH=VENV_BIN + ':/usr/local/bin:/usr/bin:/bin', ANSIBLE_NOCOLOR='1')
    return env


def bash(script, cwd, home, check=True):
    proc = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', script], cwd=str(cwd), env=user_env(home),
                          capture_output=True, text=True, timeout=600, check=False, stdin=subprocess.DEVNULL)
    if check:
        why = '%s\n--- stdout\n%s\n--- stderr\n%s' % (script, proc.stdout[-4000:], proc.stderr[-4000:])
        assert proc.returncode == 0, why
    return proc


@pytest.fixture(scope='module')
def copy(tmp_path_factory):
    """A clean copy of the collection, as a clone would have it."""
    root = tmp_path_factory.mktemp('stage')
    out = subprocess.run([os.path.join(REPO, 'scripts', 'stage-collection.sh'), str(root)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    path = out.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(path, 'galaxy.yml'))
    assert not os.path.exists(os.path.join(path, '.venv')) and not os.path.exists(os.path.join(path, '.cache'))
    return path


def installed_version(collections_dir):
    with open(os.path.join(collections_dir, 'ansible_collections', 'modelops', 'vllm', 'MANIFEST.json')) as handle:
        return yaml.safe_load(handle)['collection_info']['version']


def test_from_the_tarball(copy, tmp_path):
    home = tmp_path / 'home'
    home.mkdir()
    proc = bash(readme_examples()['install-tarball'], copy, home)
    assert '> MODULE modelops.vllm.health' in proc.stdout, proc.stdout[:2000]
    assert os.path.isfile(os.path.join(copy, 'modelops-vllm-%s.tar.gz' % version()))
    assert installed_version(str(home / '.ansible' / 'collections')) == version()


def test_from_a_clone(copy, tmp_path):
    home = tmp_path / 'home'
    home.mkdir()
    proc = bash(readme_examples()['install-clone'], copy, home)
    assert '> MODULE modelops.vllm.health' in proc.stdout, proc.stdout[:2000]
    link = home / 'ansible' / 'collections' / 'ansible_collections' / 'modelops' / 'vllm'
    assert os.path.realpath(str(link)) == os.path.realpath(copy)
    # the checkout itself is the collection: running it twice is harmless
    bash(readme_examples()['install-clone'], copy, home)
    assert os.path.realpath(str(link)) == os.path.realpath(copy)


def test_awx_project_requirements_git(copy, tmp_path):
    """The git source, with the example's URL replaced by a git repository of the clean copy."""
    repo = tmp_path / 'modelops-vllm.git'
    shutil.copytree(copy, str(repo), ignore=shutil.ignore_patterns('.git', '*.tar.gz'))
    git = ['git', '-C', str(repo), '-c', 'user.name=test', '-c', 'user.email=test@localhost']
    for args in (['init', '--quiet'], ['add', '-A'], ['commit', '--quiet', '-m', 'release'], ['tag', 'v%s' % version()]):
        subprocess.run(git + args, check=True, capture_output=True, timeout=120)
    text = readme_examples()['awx-requirements']
    assert 'version: v%s' % version() in text  # the example names the current release
    url = 'https://git.example.com/platform/modelops-vllm.git'
    assert url in text
    project = tmp_path / 'project'
    (project / 'collections').mkdir(parents=True)
    (project / 'collections' / 'requirements.yml').write_text(text.replace(url, 'file://%s' % repo) + '\n')
    home = tmp_path / 'home'
    home.mkdir()
    bash('ansible-galaxy collection install -r collections/requirements.yml -p installed', project, home)
    assert installed_version(str(project / 'installed')) == version()


def test_awx_project_requirements_file(copy, tmp_path):
    home = tmp_path / 'home'
    home.mkdir()
    build = tmp_path / 'build'
    bash('ansible-galaxy collection build --output-path %s' % build, copy, home)
    text = readme_examples()['awx-requirements-file']
    tarball = yaml.safe_load(text)['collections'][0]['name']
    assert tarball == 'collections/modelops-vllm-%s.tar.gz' % version()
    project = tmp_path / 'project'
    (project / 'collections').mkdir(parents=True)
    shutil.copy(str(build / os.path.basename(tarball)), str(project / tarball))
    (project / 'collections' / 'requirements.yml').write_text(text + '\n')
    bash('ansible-galaxy collection install -r collections/requirements.yml -p installed', project, home)
    assert installed_version(str(project / 'installed')) == version()


def test_readme_watchdog_example_is_the_shipped_playbook():
    with open(os.path.join(REPO, 'playbooks', 'watchdog.yml')) as handle:
        shipped = yaml.safe_load(handle)
    preflight, play = shipped  # the hosts to watch (on the controller), then the play
    assert preflight['hosts'] == 'localhost' and 'No host to watch' in str(preflight['tasks'])
    names = [task['name'].split(' | ')[0] for task in play.pop('pre_tasks')]
    assert names == ['One inventory host only, when the run is for one (vllm_watchdog_one_host)', 'Preflight']
    assert yaml.safe_load(readme_examples()['watchdog-playbook']) == [play]
    assert play['become'] == '{{ vllm_watchdog_become | default(true) }}'
