#include "hw_capture.h"
