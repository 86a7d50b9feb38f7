#include "hw_ptrace.h"
