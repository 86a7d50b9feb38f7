#include "hw_symbols.h"
