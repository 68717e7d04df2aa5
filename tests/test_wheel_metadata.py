"""The wheel built from a clean copy of the repository: its version is the package's
`__version__`, it carries the Apache-2.0 LICENSE, and its metadata says so."""

import email
import hashlib
import zipfile

import pytest

import keras_largebatch
from tests.support.runs import ROOT
from tests.support.wheels import build_wheel

# md5 of the Apache Software Foundation's text, https://www.apache.org/licenses/LICENSE-2.0.txt.
APACHE_2_0_MD5 = "3b83ef96387f14655fc854ddc3c6bd57"


def test_the_license_is_the_apache_2_0_text():
    assert hashlib.md5((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_MD5


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def _read(wheel, suffix):
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if ".dist-info/" in n and n.endswith(suffix)]
        return archive.read(name)


def test_the_wheel_has_the_package_version(wheel):
    version = keras_largebatch.__version__
    assert wheel.name.startswith(f"keras_largebatch-{version}-")
    metadata = email.message_from_bytes(_read(wheel, "/METADATA"))
    assert metadata["Name"] == "keras-largebatch"
    assert metadata["Version"] == version


def test_the_wheel_carries_the_license_and_says_which(wheel):
    assert _read(wheel, "/LICENSE") == (ROOT / "LICENSE").read_bytes()
    metadata = email.message_from_bytes(_read(wheel, "/METADATA"))
    # PEP 639: an SPDX expression, and no legacy License field or classifier beside it.
    assert metadata["Metadata-Version"] == "2.4"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License"] is None
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = metadata.get_all("Classifier")
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert [c for c in classifiers if c.startswith("Programming Language :: Python :: 3.")] == [
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
    ]
    assert "Operating System :: OS Independent" in classifiers
