// Finding the program `accel launch` runs (see Executable.h).
#include "Executable.h"

#include "Flags.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace accel {
namespace {

enum class FileKind { Executable, Missing, Folder, NotExecutable, Unreadable };

FileKind classify(const std::string& path, int* statErrno) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) {
    *statErrno = errno;
    return errno == ENOENT || errno == ENOTDIR ? FileKind::Missing : FileKind::Unreadable;
  }
  if (S_ISDIR(info.st_mode))
    return FileKind::Folder;
  if (!S_ISREG(info.st_mode) || ::access(path.c_str(), X_OK) != 0)
    return FileKind::NotExecutable;
  return FileKind::Executable;
}

std::string cannotRun(const std::string& program) {
  return "cannot run '" + program + "': ";
}

std::string checkedPath(const std::string& path) {
  int statErrno = 0;
  switch (classify(path, &statErrno)) {
  case FileKind::Executable:
    return path;
  case FileKind::Missing:
    throw UsageError(cannotRun(path) + "no such file (check the path, or build the program first)");
  case FileKind::Folder:
    throw UsageError(cannotRun(path) + "it is a folder (give the program inside it)");
  case FileKind::NotExecutable:
    throw UsageError(cannotRun(path) + "not an executable file (if it is one, chmod +x " + path + ")");
  case FileKind::Unreadable:
    break;
  }
  throw UsageError(cannotRun(path) + std::strerror(statErrno));
}

std::string searchPath(const std::string& name) {
  const char* pathVariable = std::getenv("PATH");
  std::string folders = pathVariable ? pathVariable : "/usr/local/bin:/usr/bin:/bin";
  bool sawNonExecutable = false;
  size_t start = 0;
  while (start <= folders.size()) {
    size_t end = folders.find(':', start);
    if (end == std::string::npos)
      end = folders.size();
    std::string folder = folders.substr(start, end - start);
    std::string candidate = (folder.empty() ? "." : folder) + "/" + name; // an empty entry means "."
    int statErrno = 0;
    FileKind kind = classify(candidate, &statErrno);
    if (kind == FileKind::Executable)
      return candidate;
    sawNonExecutable = sawNonExecutable || kind == FileKind::NotExecutable;
    start = end + 1;
  }
  if (sawNonExecutable)
    throw UsageError(cannotRun(name) + "found on PATH but not executable (chmod +x it, or give its path)");
  throw UsageError(cannotRun(name) + "not found on PATH (give its path, like ./" + name +
                   ", or add its folder to PATH)");
}

} // namespace

std::string resolveExecutable(const std::string& program) {
  if (program.empty())
    throw UsageError("the program to run is an empty string (give a program, like ./train)");
  if (program.find('/') != std::string::npos)
    return checkedPath(program);
  return searchPath(program);
}

} // namespace accel
