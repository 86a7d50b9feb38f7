// Placeholder: replaced by the CHangwatchCapture implementation.
#pragma once
