"""Every public name of the NKI API reference's index (server/accelopt/nki/api_index.txt, written
from the Neuron SDK 2.33 docs) is either implemented or refused the NKI way: an NkiError naming
the API, saying "not supported by the emulator yet", at the kernel's own file and line. Nothing
from inside the emulator escapes as a TypeError/AttributeError or names an emulator module."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt.nki import constants, facade, isa, language
from accelopt.nki.errors import NkiError
from accelopt.nki.unsupported import NOT_SUPPORTED, Unsupported, api_index

MODULES = {
    "nki": (facade, "nki"),
    "nki.language": (language, "nl"),
    "nki.isa": (isa, "nisa"),
    "nki.language.constants": (constants, "nl.constants"),
}

ALL_NAMES = sorted((module, name) for module, names in api_index().items() for name in names)


def test_the_index_covers_the_reference_modules():
    index = api_index()
    assert set(index) == set(MODULES)
    assert len(index["nki.language"]) > 100 and len(index["nki.isa"]) > 50
    # a few names the corpus of public kernels tripped on are listed
    for module, name in [
        ("nki.language", "gelu_apprx_sigmoid"),
        ("nki.language", "fori_loop"),
        ("nki.isa", "tensor_scalar_reduce"),
        ("nki.isa", "register_load"),
        ("nki.isa", "dma_transpose"),
    ]:
        assert name in index[module]


def _refused(module: str, name: str) -> bool:
    return isinstance(getattr(MODULES[module][0], name), Unsupported)


@pytest.mark.parametrize(("module", "name"), ALL_NAMES, ids=[f"{m}.{n}" for m, n in ALL_NAMES])
def test_every_listed_name_is_implemented_or_refused_nki_style(nki_kernel, module, name):
    value = getattr(MODULES[module][0], name)  # never an AttributeError
    if not isinstance(value, Unsupported):
        return  # implemented: its behaviour is tested with the feature
    alias = MODULES[module][1]
    k = nki_kernel(f"""
    def k(x):
        {alias}.{name}(x)
        return x
    """)
    with pytest.raises(NkiError) as err:
        k.run("k", np.zeros((2, 2), np.float32))
    assert err.value.code == "err_unsupported_api"
    assert f"{module}.{name} is {NOT_SUPPORTED}" in err.value.message
    assert (err.value.path, err.value.line) == (str(k.path), k.line_of(f"{alias}.{name}("))
    assert "accelopt" not in str(err.value.message)


def test_most_of_the_index_is_implemented():
    refused = [f"{m}.{n}" for m, n in ALL_NAMES if _refused(m, n)]
    assert len(refused) < len(ALL_NAMES) / 2, refused


def test_a_refused_name_used_at_module_level_reports_the_kernel_line(tmp_path):
    from accelopt.nki import runtime

    text = "import nki\nimport nki.isa as nisa\nSTATE = nisa.rand_get_state()\n\ndef k(x):\n    return x\n"
    path = tmp_path / "module_level.py"
    path.write_text(text)
    with pytest.raises(NkiError) as err:
        runtime.load_kernel(text, "k", str(path))
    assert (err.value.path, err.value.line) == (str(path), 3)
    assert "nki.isa.rand_get_state is not supported by the emulator yet" in err.value.message


def test_a_name_outside_the_reference_is_an_nki_error_that_hasattr_understands(nki_kernel):
    k = nki_kernel("""
    def k(x):
        assert not hasattr(nl, "no_such_api")
        nl.no_such_api(x)
        return x
    """)
    with pytest.raises(NkiError) as err:
        k.run("k", np.zeros((2, 2), np.float32))
    assert err.value.code == "err_unknown_api"
    assert err.value.line == k.line_of("nl.no_such_api(x)")


@pytest.mark.parametrize(
    ("call", "api"),
    [
        ("nisa.memset(t)", "nisa.memset"),
        ("nisa.tensor_tensor(t, t, t)", "nisa.tensor_tensor"),
        ("t.slice(1, 0)", "NkiTensor.slice"),
        ("t.rearrange(('p', 'f'), ('p', 'f'))", "NkiTensor.rearrange"),
    ],
)
def test_wrong_calls_are_nki_errors_naming_the_api_not_the_emulator(nki_kernel, call, api):
    k = nki_kernel(f"""
    def k(x):
        t = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf)
        {call}
        return x
    """)
    with pytest.raises(NkiError) as err:
        k.run("k", np.zeros((2, 2), np.float32))
    assert err.value.line == k.line_of(call)
    assert api in err.value.message
    assert "accelopt" not in err.value.message and "_into" not in err.value.message
