// Only the declaration in include/hw_fuzz.h; SwiftPM needs one source file in a C target.
#include "hw_fuzz.h"
