// What run_main sets up before parsing anything, for every command:
//  - standard descriptors 0, 1 and 2 that were closed (`qrun run <&-`) are held by
//    /dev/null opened read-only, so no file qrun opens later becomes "stdin" or "stdout";
//    reading such a stdin gives end of file, writing such a stdout still fails;
//  - a SIGBUS handler: a fault inside a mapped model file (gguf/mapped_files.h), which
//    means the file was truncated while in use, prints one line naming it and exits with
//    kIo (3) instead of the silent "Bus error" (exit 135). Other SIGBUS faults stay fatal
//    as before.
#pragma once

namespace qrun::cli {

void setup_process();

}  // namespace qrun::cli
