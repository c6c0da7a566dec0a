# Finds one Python interpreter with its headers and pybind11 for the `pagellm` Python package.
# Debian's pybind11-dev and python3-pytest are built for /usr/bin/python3, so that interpreter is
# taken when it exists (a python3 earlier on PATH, e.g. pyenv's, is another ABI); -DPython_EXECUTABLE
# picks another (pip install . passes the interpreter that runs pip). The module, its tests and
# `pip install .` all use ${Python_EXECUTABLE}.
if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "The Python interpreter of the Python package and its tests")
endif()
find_package(Python 3.8 COMPONENTS Interpreter Development.Module)
if(Python_FOUND)
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
if(Python_FOUND AND pybind11_FOUND)
  set(PAGELLM_HAVE_PYTHON ON)
elseif(PAGELLM_PYTHON STREQUAL "ON" OR "$ENV{CI}" STREQUAL "true")
  message(FATAL_ERROR "the Python package needs Python's headers and pybind11 (apt-get install python3-dev "
                      "pybind11-dev; scripts/setup.sh does); -DPAGELLM_PYTHON=OFF builds without it")
else()
  message(STATUS "pagellm: no Python headers or pybind11, so no Python package (apt-get install python3-dev pybind11-dev)")
endif()
