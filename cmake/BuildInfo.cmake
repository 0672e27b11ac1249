# Build facts for `zerotrain report` (src/cli/report.cpp): version, git commit, compiler,
# flags. They go into a generated header that only report.cpp includes, so a new commit
# recompiles one file; a compile definition would change every object's command line.
# The commit is read at configure time; CMake re-configures when HEAD moves (the files
# below), so it stays current. "-dirty": tracked files differed from HEAD at configure.
set(ZT_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} RESULT_VARIABLE zt_git_rc
    OUTPUT_VARIABLE zt_git_head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(zt_git_rc EQUAL 0)
    set(ZT_GIT_COMMIT ${zt_git_head})
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE zt_git_dirty ERROR_QUIET)
    if(NOT zt_git_dirty STREQUAL "")
      string(APPEND ZT_GIT_COMMIT "-dirty")
    endif()
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --absolute-git-dir
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE zt_git_dir
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref -q HEAD
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE zt_git_ref
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    foreach(f HEAD ${zt_git_ref} packed-refs)
      if(EXISTS "${zt_git_dir}/${f}")
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${zt_git_dir}/${f}")
      endif()
    endforeach()
  endif()
endif()

string(TOUPPER "${CMAKE_BUILD_TYPE}" zt_build_type_upper)
string(JOIN " " ZT_BUILD_CXX_FLAGS ${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${zt_build_type_upper}} ${ZT_OPT_FLAGS})
string(STRIP "${ZT_BUILD_CXX_FLAGS}" ZT_BUILD_CXX_FLAGS)
string(REPLACE "\\" "\\\\" ZT_BUILD_CXX_FLAGS "${ZT_BUILD_CXX_FLAGS}")  # a C string literal
string(REPLACE "\"" "\\\"" ZT_BUILD_CXX_FLAGS "${ZT_BUILD_CXX_FLAGS}")
set(ZT_BUILD_OPTIONS "ZT_NATIVE=${ZT_NATIVE} ZT_SANITIZE=${ZT_SANITIZE} ZT_FUZZ=${ZT_FUZZ}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/build_info.h.in ${PROJECT_BINARY_DIR}/generated/zt_build_info.h @ONLY)
