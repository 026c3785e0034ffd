# test/passes/lit.cfg.py: lit settings for the pass tests: one .cpp per pass or driver behaviour.
import os

import lit.formats

config.name = "accel-rewrite passes"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".cpp"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)

accel_rewrite = os.path.join(config.accel_rewrite_dir, "accel-rewrite")
if not os.path.exists(accel_rewrite):
    lit_config.fatal(
        "accel-rewrite not found at %s; build it first (cmake --build <build dir> --target accel-rewrite)"
        % accel_rewrite
    )
for tool in ("FileCheck", "not", "count"):
    if not os.path.exists(os.path.join(config.llvm_tools_dir, tool)):
        lit_config.fatal(
            "%s not found in %s; install llvm-19-tools (Debian) or set ACCEL_LLVM_TOOLS_DIR"
            % (tool, config.llvm_tools_dir)
        )

config.environment["PATH"] = os.pathsep.join(
    [config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))]
)
# Diagnostics from the tool are checked as text: no colours, a stable locale.
config.environment["LC_ALL"] = "C"
config.environment.pop("TERM", None)

# clang-apply-replacements (Debian's clang-tools-19) applies --export-fixes output; tests that need it say so.
if os.path.exists(os.path.join(config.llvm_tools_dir, "clang-apply-replacements")):
    config.available_features.add("clang-apply-replacements")

config.substitutions.append(("%accel-rewrite", accel_rewrite))
config.substitutions.append(("%clang", os.path.join(config.llvm_tools_dir, "clang")))
config.substitutions.append(("%torch_includes", config.torch_includes))
if config.torch_includes:
    config.available_features.add("torch")
