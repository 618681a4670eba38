"""The shared registry: decorators, names, lookups with suggestions, --usr_dir."""

import textwrap

import pytest

from t2tcli import registry
from t2tcli.data.problem import Text2TextProblem
from t2tcli.errors import UserError
from t2tcli.hparams import HParams


def test_snake_case():
    assert registry.snake_case("QpIsDuplicate") == "qp_is_duplicate"
    assert registry.snake_case("T5Small") == "t5_small"
    assert registry.snake_case("MTFTransformerTiny") == "mtf_transformer_tiny"


def test_register_and_lookup_problem():
    @registry.register_problem
    class RegistryTestProblemOne(Text2TextProblem):
        pass

    assert registry.problem("registry_test_problem_one").name == "registry_test_problem_one"
    with pytest.raises(UserError, match="did you mean 'registry_test_problem_one'"):
        registry.problem("registry_test_problem_on")


def test_register_twice_is_an_error():
    @registry.register_problem("registry_test_twice")
    class A(Text2TextProblem):
        pass

    with pytest.raises(UserError, match="'registry_test_twice' is already registered"):

        @registry.register_problem("registry_test_twice")
        class B(Text2TextProblem):
            pass


def test_problem_and_mixture_share_a_namespace():
    @registry.register_problem("registry_test_shared")
    class A(Text2TextProblem):
        pass

    with pytest.raises(UserError, match="already registered as a problem"):

        @registry.register_mixture("registry_test_shared")
        class B:
            pass


def test_hparams_lookup_suggests():
    @registry.register_hparams
    def registry_test_hparams():
        return HParams(a=1)

    assert registry.hparams("registry_test_hparams").a == 1
    with pytest.raises(UserError, match="unknown hparams set 'registry_test_hparam'; did you mean"):
        registry.hparams("registry_test_hparam")


def test_missing_name_is_a_clear_error():
    with pytest.raises(UserError, match="--problem is required"):
        registry.problem("")


def test_usr_dir_package_with_relative_import(tmp_path):
    pkg = tmp_path / "my_usr_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import things\n")
    (pkg / "things.py").write_text(
        textwrap.dedent(
            """
            from t2tcli.hparams import HParams
            from t2tcli.data.problem import Text2TextProblem
            from t2tcli.registry import register_hparams, register_problem

            @register_problem
            class UsrPackageProblem(Text2TextProblem):
                pass

            @register_hparams
            def usr_package_hparams():
                return HParams(x=1)
            """
        )
    )
    registry.import_usr_dir(str(pkg))
    registry.import_usr_dir(str(pkg))  # a second import is a no-op, not a duplicate registration
    assert "usr_package_problem" in registry.list_problems()
    assert "usr_package_hparams" in registry.list_hparams()


def test_usr_dir_error_names_file_and_line(tmp_path):
    (tmp_path / "broken.py").write_text("x = 1\ny = undefined_name\n")
    with pytest.raises(UserError, match=r"broken\.py:2: NameError"):
        registry.import_usr_dir(str(tmp_path))


def test_usr_dir_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "bad_syntax.py").write_text("def f(:\n")
    with pytest.raises(UserError, match=r"bad_syntax\.py:1: SyntaxError"):
        registry.import_usr_dir(str(tmp_path))


def test_usr_dir_missing():
    with pytest.raises(UserError, match="no such directory"):
        registry.import_usr_dir("/nonexistent/usr/dir")
