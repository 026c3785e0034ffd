// docs/passes.md's table of the passes is generated from the rows of the passes that passes/Passes.def, the
// one list of the passes, names: this fails, naming the difference, when a row changed and the table was not
// regenerated (`python3 scripts/passes_table.py --update`).
// RUN: python3 %S/../../scripts/passes_table.py --check | FileCheck %s
// CHECK: passes table matches {{.*}}Passes.def
