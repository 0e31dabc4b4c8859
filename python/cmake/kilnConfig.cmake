# kilnConfig.cmake - find_package(kiln) for the library installed by
# `pip install .` (inside the Python package). Point CMake at it with
#   cmake -Dkiln_DIR=$(python -c "import kiln; print(kiln.get_cmake_dir())")
# Defines the imported target kiln::kiln (libkiln and include/kiln).
get_filename_component(_kiln_pkg "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET kiln::kiln)
  add_library(kiln::kiln SHARED IMPORTED)
  set_target_properties(kiln::kiln PROPERTIES
    IMPORTED_LOCATION "${_kiln_pkg}/libkiln.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_kiln_pkg}/include")
endif()
set(kiln_FOUND TRUE)
unset(_kiln_pkg)
