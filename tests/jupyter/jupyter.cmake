# ---- `ember kernel` with Jupyter's own clients (tests/jupyter/): jupyter_client round trips
# (test_kernel.py) and examples/notebook.ipynb executed by nbclient and nbconvert
# (test_notebook.py, pictures and the executed notebook in build/tests/jupyter). Need the
# PyPI packages scripts/setup.sh installs (jupyter_client nbclient nbformat nbconvert); exit
# 77, "skipped", without them or without the kernel in the build (ZeroMQ and libcrypto).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME jupyter/kernel
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_kernel.py $<TARGET_FILE:ember_host>)
  add_test(NAME jupyter/notebook
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_notebook.py $<TARGET_FILE:ember_host>
            ${CMAKE_SOURCE_DIR}/examples/notebook.ipynb ${CMAKE_BINARY_DIR}/tests/jupyter)
  set_tests_properties(jupyter/kernel jupyter/notebook PROPERTIES
    ENVIRONMENT "EMBER_NUM_THREADS=2" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
