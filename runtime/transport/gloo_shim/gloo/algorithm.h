// Declarations c10d's ProcessGroupGloo.hpp needs from Gloo (see ../README.md for why these exist).
#pragma once
