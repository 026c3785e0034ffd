// Local stub of jsoncpp (unused by the GAN example's code).
#pragma once
