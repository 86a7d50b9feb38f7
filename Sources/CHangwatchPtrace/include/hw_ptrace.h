// Placeholder: replaced by the CHangwatchPtrace implementation.
#pragma once
