// Placeholder: replaced by the CHangwatchSymbols implementation.
#pragma once
