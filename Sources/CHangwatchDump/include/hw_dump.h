// Placeholder: replaced by the CHangwatchDump implementation.
#pragma once
