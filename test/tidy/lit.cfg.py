# test/tidy/lit.cfg.py: lit settings for the clang-tidy module's tests: each runs Debian's clang-tidy-19 with
# `--load` of the module this build made, as a user does.
import os

import lit.formats

config.name = "accelerate clang-tidy module"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".cpp"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)

accel_rewrite = os.path.join(config.accel_rewrite_dir, "accel-rewrite")
for path, what in ((config.tidy_module, "the clang-tidy module"), (accel_rewrite, "accel-rewrite")):
    if not os.path.exists(path):
        lit_config.fatal(
            "%s not found at %s; build it first (cmake --build <build dir> --target accelerate-tidy accel-rewrite)"
            % (what, path)
        )
if not os.path.exists(config.clang_tidy):
    lit_config.fatal("clang-tidy-19 not found at %s; install clang-tidy-19 (Debian)" % config.clang_tidy)
for tool in ("FileCheck", "not", "count"):
    if not os.path.exists(os.path.join(config.llvm_tools_dir, tool)):
        lit_config.fatal("%s not found in %s; install llvm-19-tools (Debian)" % (tool, config.llvm_tools_dir))

config.environment["PATH"] = os.pathsep.join(
    [config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))]
)
config.environment["LC_ALL"] = "C"
config.environment.pop("TERM", None)

# %tidy: clang-tidy with the module loaded and only its checks on; tests add --fix, -config and the file.
config.substitutions.append(
    ("%tidy", "%s --load=%s -checks=-*,accelerate-* --quiet" % (config.clang_tidy, config.tidy_module))
)
config.substitutions.append(("%clang-tidy", config.clang_tidy))
config.substitutions.append(("%accel-clang-tidy", os.path.join(config.accel_rewrite_dir, "accel-clang-tidy")))
config.substitutions.append(("%tidy_module", config.tidy_module))
config.substitutions.append(("%accel-rewrite", accel_rewrite))
config.substitutions.append(("%passes_inputs", os.path.join(config.source_root, "test", "passes", "Inputs")))
config.substitutions.append(("%source_root", config.source_root))
# What accelerate_target() wrote for test/fixtures' loops at build time (accel-rewrite with #line directives).
config.substitutions.append(("%fixtures_rewritten", os.path.join(config.binary_root, "test", "fixtures")))
config.substitutions.append(("%torch_includes", config.torch_includes))
if config.torch_includes:
    config.available_features.add("torch")
