#include "hw_dump.h"
