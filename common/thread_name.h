#pragma once
// Names the calling thread (Linux: at most 15 characters, longer names are cut), so that
// `top -H`, `ps -L`, gdb and profilers tell Troika's threads from the application's.

#include <pthread.h>

#include <string>

namespace troika {

inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace troika
