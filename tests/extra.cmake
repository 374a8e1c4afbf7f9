# Extra tests, included by tests/CMakeLists.txt: each block says what it needs.

# ---- safetensors files exchanged with NumPy (tests/interop/), in both directions.
find_program(EMBER_NUMPY_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(EMBER_NUMPY_PYTHON)
  foreach(direction ember-to-python python-to-ember)
    add_test(NAME interop/safetensors_${direction}
      COMMAND ${EMBER_NUMPY_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/interop/safetensors_interop.py
              ${direction} $<TARGET_FILE:ember_host> ${CMAKE_CURRENT_BINARY_DIR}/interop)
    set_tests_properties(interop/safetensors_${direction} PROPERTIES ENVIRONMENT "EMBER_NUM_THREADS=2")
  endforeach()
endif()

# ---- TensorBoard's own reader (the tensorboard package, EventAccumulator) on the event files
# of a train pipeline and of ember.tensorboard.SummaryWriter (tests/interop/tensorboard_roundtrip.py);
# skipped (exit 77) with a message when the package is missing: pip install tensorboard.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME interop/tensorboard
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/interop/tensorboard_roundtrip.py $<TARGET_FILE:ember_host>)
  set_tests_properties(interop/tensorboard PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "EMBER_NUM_THREADS=2")
endif()

# ---- state dicts of an LSTM and a GPT block between ember and PyTorch, both ways, with the
# same outputs (tests/interop/seq_state_dict.py; exits 77, skipped, without torch/safetensors).
if(Python3_Interpreter_FOUND)
  add_test(NAME interop/seq_state_dict
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/interop/seq_state_dict.py $<TARGET_FILE:ember_host>
            ${CMAKE_CURRENT_BINARY_DIR}/interop/seq)
  set_tests_properties(interop/seq_state_dict PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "EMBER_NUM_THREADS=2")
endif()

# ---- the ember executable: command line (tests/repl/test_cli.py) and the REPL in a real
# terminal driven through tmux (tests/repl/test_tty.py; exits 77, "skipped", without tmux).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME host/cli
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/repl/test_cli.py $<TARGET_FILE:ember_host>)
  add_test(NAME host/hostile_inputs
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/repl/test_hostile_cli.py $<TARGET_FILE:ember_host>)
  add_test(NAME host/repl_tty
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/repl/test_tty.py $<TARGET_FILE:ember_host>)
  set_tests_properties(host/cli host/hostile_inputs host/repl_tty PROPERTIES
    ENVIRONMENT "EMBER_NUM_THREADS=2" TIMEOUT 120 SKIP_RETURN_CODE 77)
else()
  message(WARNING "python3 not found: the ember CLI and REPL tests are not registered")
endif()

# ---- graph engine (tests/graph/): PageRank against networkx and igraph, Kendall's tau
# against scipy, a SNAP fixture against a Python parse; libember through ctypes. Needs
# Debian's python3-networkx (python3-igraph, python3-scipy optional); exits 77, "skipped",
# without networkx.
find_program(EMBER_GRAPH_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(EMBER_GRAPH_PYTHON)
  add_test(NAME graph/networkx
    COMMAND ${EMBER_GRAPH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/graph/check_networkx.py $<TARGET_FILE:ember>)
  set(graph_py_env "EMBER_NUM_THREADS=2")
  if(EMBER_SANITIZE)
    # Python loads the instrumented libember through ctypes: the ASan runtime has to be
    # preloaded, and Python's own allocations are not ours to leak-check.
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE asan_runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND graph_py_env "LD_PRELOAD=${asan_runtime}" "ASAN_OPTIONS=detect_leaks=0")
  endif()
  set_tests_properties(graph/networkx PROPERTIES ENVIRONMENT "${graph_py_env}" SKIP_RETURN_CODE 77 TIMEOUT 120)
  # weighted PageRank against numpy's float64 iteration and networkx (weight='weight')
  add_test(NAME graph/weighted
    COMMAND ${EMBER_GRAPH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/graph/check_weighted.py $<TARGET_FILE:ember>)
  set_tests_properties(graph/weighted PROPERTIES ENVIRONMENT "${graph_py_env}" SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

# ---- distributed (tests/distributed/): multi-process tests through `ember launch` (mpirun) on 2 and
# 4 ranks of one thread each, and Python drivers for timeouts (a stopped, killed or busy
# rank) and the launcher itself. Need Open MPI (libopenmpi-dev, openmpi-bin). They share one
# lock so that they do not oversubscribe a small machine together; about 30 s in all.
find_program(EMBER_MPIRUN mpirun)
# Open MPI leaks on purpose at exit (its components are dlopen'ed, so their frames cannot
# even be named in a suppression file): leak checking is off for processes MPI starts.
# ASan's other checks stay on, and ember's own dist code is leak-checked by tests/c/test_dist.c.
set(dist_env "EMBER_TEST_DIST=1")
if(EMBER_SANITIZE)
  list(APPEND dist_env "ASAN_OPTIONS=detect_leaks=0")
endif()
if(EMBER_HAVE_MPI AND EMBER_MPIRUN)
  foreach(script collectives ddp ddp_unused ddp_join dlrm_ddp dlrm_sharded)
    foreach(np 2 4)
      add_test(NAME distributed/${script}_np${np}
        COMMAND $<TARGET_FILE:ember_host> launch -n ${np} --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${script}.lua
        WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
      set_tests_properties(distributed/${script}_np${np} PROPERTIES TIMEOUT 90 RESOURCE_LOCK ember_mpi
        ENVIRONMENT "${dist_env}")
    endforeach()
  endforeach()
  # all_to_all(_v), gather, scatter, reduce, all_gather_v at 2, 3 and 4 ranks; at 3 ranks
  # also with every count above 1000 elements sent point to point (the path of counts
  # above 2^31 - 1, runtime/plugins/mpi/mpi_coll.c)
  foreach(np 2 3 4)
    add_test(NAME distributed/more_collectives_np${np}
      COMMAND $<TARGET_FILE:ember_host> launch -n ${np} --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/more_collectives.lua
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(distributed/more_collectives_np${np} PROPERTIES TIMEOUT 120 RESOURCE_LOCK ember_mpi
      ENVIRONMENT "${dist_env}")
  endforeach()
  # partitioned graphs: PageRank at 2, 3 and 4 ranks equal (bits) to the single process,
  # the partitioned cache and its refusal (tests/distributed/pagerank_dist.lua)
  foreach(np 2 3 4)
    add_test(NAME distributed/pagerank_dist_np${np}
      COMMAND $<TARGET_FILE:ember_host> launch -n ${np} --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/pagerank_dist.lua
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(distributed/pagerank_dist_np${np} PROPERTIES TIMEOUT 120 RESOURCE_LOCK ember_mpi
      ENVIRONMENT "${dist_env}")
  endforeach()
  # the PageRank job over 2 ranks: scores file equal to the single process's, the cache
  # reused and refused at 3 ranks, a killed rank ending the other with a timeout
  add_test(NAME distributed/pagerank_job
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/distributed/pagerank_job.sh $<TARGET_FILE:ember_host>)
  set_tests_properties(distributed/pagerank_job PROPERTIES TIMEOUT 180 RESOURCE_LOCK ember_mpi
    ENVIRONMENT "${dist_env}")
  add_test(NAME distributed/more_collectives_np3_p2p
    COMMAND $<TARGET_FILE:ember_host> launch -n 3 --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/more_collectives.lua
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(distributed/more_collectives_np3_p2p PROPERTIES TIMEOUT 120 RESOURCE_LOCK ember_mpi
    ENVIRONMENT "${dist_env};EMBER_DIST_MPI_P2P_ABOVE=1000")
  # the same collectives with shared memory off: plain all_reduce and DDP buckets through MPI
  # (dlrm_sharded: the tables' all_to_all_v among DDP's buckets, all through MPI)
  foreach(script collectives ddp dlrm_sharded)
    add_test(NAME distributed/${script}_np2_no_shm
      COMMAND $<TARGET_FILE:ember_host> launch -n 2 --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${script}.lua
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(distributed/${script}_np2_no_shm PROPERTIES TIMEOUT 90 RESOURCE_LOCK ember_mpi
      ENVIRONMENT "${dist_env};EMBER_DIST_SHM=0")
  endforeach()
  # hierarchical reduction: ranks in simulated hosts of two (EMBER_DIST_RANKS_PER_HOST), so
  # the host's ranks reduce in shared memory and one leader per host crosses through MPI
  foreach(script collectives ddp)
    foreach(np 3 4)
      add_test(NAME distributed/${script}_np${np}_hier
        COMMAND $<TARGET_FILE:ember_host> launch -n ${np} --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${script}.lua
        WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
      set_tests_properties(distributed/${script}_np${np}_hier PROPERTIES TIMEOUT 90 RESOURCE_LOCK ember_mpi
        ENVIRONMENT "${dist_env};EMBER_DIST_RANKS_PER_HOST=2")
    endforeach()
  endforeach()
  # NCCL (tests/distributed/nccl_*.lua, against MPI on the CPU): one GPU per rank, so the scripts
  # exit 77 (skipped) when there are fewer GPUs than ranks; one GPU runs the 1-rank cases.
  if(EMBER_HAVE_CUDA AND EMBER_NCCL_LIBRARY AND EMBER_NCCL_INCLUDE_DIR)
    foreach(case nccl_collectives:1 nccl_collectives:2 nccl_ddp:1 nccl_ddp:2 nccl_timeout:2)
      string(REPLACE ":" ";" parts ${case})
      list(GET parts 0 script)
      list(GET parts 1 np)
      add_test(NAME distributed/${script}_np${np}
        COMMAND $<TARGET_FILE:ember_host> launch -n ${np} --threads 1 ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${script}.lua
        WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
      set_tests_properties(distributed/${script}_np${np} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 RESOURCE_LOCK ember_mpi
        ENVIRONMENT "${dist_env}")
    endforeach()
  endif()
  if(Python3_Interpreter_FOUND)
    foreach(driver timeout launch dlrm_pipeline)
      add_test(NAME distributed/${driver}
        COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${driver}.py $<TARGET_FILE:ember_host>)
      set_tests_properties(distributed/${driver} PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 RESOURCE_LOCK ember_mpi
        ENVIRONMENT "${dist_env}")
    endforeach()
  endif()
else()
  message(STATUS "Open MPI not found: the multi-process tests (tests/distributed) are not registered")
endif()

# ---- the NCCL backend's bookkeeping on the CPU: runtime/plugins/cuda/nccl_backend.c linked
# with fake CUDA, NCCL and device-layer functions (tests/c/nccl_backend_fake.c says what it
# covers). Needs the headers only; the GPU itself is tested by tests/distributed/nccl_*.lua.
if(EMBER_HAVE_CUDA AND EMBER_NCCL_LIBRARY AND EMBER_NCCL_INCLUDE_DIR)
  add_executable(test_nccl_backend ${CMAKE_CURRENT_SOURCE_DIR}/c/nccl_backend_fake.c
                 ${CMAKE_SOURCE_DIR}/runtime/plugins/cuda/nccl_backend.c)
  target_compile_definitions(test_nccl_backend PRIVATE EMBER_HAVE_NCCL)
  target_include_directories(test_nccl_backend PRIVATE ${CMAKE_SOURCE_DIR}/runtime/include ${CMAKE_SOURCE_DIR}/runtime
                             ${CUDAToolkit_INCLUDE_DIRS} ${EMBER_NCCL_INCLUDE_DIR})
  target_link_libraries(test_nccl_backend PRIVATE ember ${CMOCKA_LIBRARY} Threads::Threads m)
  set_target_properties(test_nccl_backend PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME c/test_nccl_backend COMMAND test_nccl_backend)
  set_tests_properties(c/test_nccl_backend PROPERTIES TIMEOUT 60)
endif()

# ---- the plugin handshake (tests/c/test_plugin_abi.c): a fake plugin built "against another
# ember" (tests/c/plugin_abi_fake.c), which both loaders must refuse with a clear error.
add_library(ember_fake_plugin MODULE ${CMAKE_CURRENT_SOURCE_DIR}/c/plugin_abi_fake.c)
target_include_directories(ember_fake_plugin PRIVATE ${CMAKE_SOURCE_DIR}/runtime/include ${CMAKE_SOURCE_DIR}/runtime)
set_target_properties(ember_fake_plugin PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_definitions(test_plugin_abi PRIVATE EMBER_FAKE_PLUGIN="$<TARGET_FILE:ember_fake_plugin>")
add_dependencies(test_plugin_abi ember_fake_plugin)

# ---- README: every ```lua block of README.md runs (lead)
add_test(NAME readme/lua_blocks
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/readme/check_readme.py $<TARGET_FILE:ember_host>
          ${CMAKE_SOURCE_DIR}/README.md)
set_tests_properties(readme/lua_blocks PROPERTIES ENVIRONMENT "EMBER_NUM_THREADS=2")

# ---- torchrun-style starts without MPI: the Gloo backend (runtime/plugins/gloo) and the c10d store.
# The distributed/ scripts on 2, 3 and 4 local processes given RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
# (tests/distributed/torchrun.py, a free port each, rank 0 hosting the store), the same under PyPI's
# real torchrun (tests/distributed/real_torchrun.py: its agent hosts the store; skipped without
# torch), the failure cases (tests/distributed/gloo_failures.py: killed, stopped and busy ranks,
# mismatched calls, bad start-ups), and the store against torch.distributed.TCPStore both ways
# (tests/distributed/store_interop.py; skipped without torch). Share the dist tests' lock.
find_package(Python3 COMPONENTS Interpreter)
if(EMBER_HAVE_GLOO AND Python3_Interpreter_FOUND)
  # new_collectives exits 77 (skipped) while libember lacks all_to_all & co.
  # (dlrm_sharded: the tables' all_to_all_v, through shared memory on one host under Gloo)
  foreach(case collectives:2 collectives:3 collectives:4 ddp:2 ddp:4 mismatch:4 new_collectives:2 new_collectives:3
          new_collectives:4 dlrm_sharded:2 dlrm_sharded:4)
    string(REPLACE ":" ";" parts ${case})
    list(GET parts 0 script)
    list(GET parts 1 np)
    add_test(NAME distributed/gloo_${script}_np${np}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/distributed/torchrun.py $<TARGET_FILE:ember_host> ${np}
              ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${script}.lua
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(distributed/gloo_${script}_np${np} PROPERTIES TIMEOUT 120 RESOURCE_LOCK ember_mpi
      SKIP_RETURN_CODE 77 ENVIRONMENT "${dist_env}")
  endforeach()
  foreach(driver gloo_failures real_torchrun)
    add_test(NAME distributed/${driver}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/distributed/${driver}.py $<TARGET_FILE:ember_host>)
    set_tests_properties(distributed/${driver} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK ember_mpi
      ENVIRONMENT "${dist_env}")
  endforeach()
endif()
if(Python3_Interpreter_FOUND)
  add_test(NAME distributed/store_interop
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/distributed/store_interop.py $<TARGET_FILE:ember_host>)
  set_tests_properties(distributed/store_interop PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()

# ---- the reader/trainer notice ring (tests/c/test_pipeline_ring.c) handles zmq_msg_t frames
# itself; without ZeroMQ there is no ring to test.
if(EMBER_HAVE_ZMQ)
  target_link_libraries(test_pipeline_ring PRIVATE ${ZMQ_LINK_LIBRARIES})
else()
  set_tests_properties(c/test_pipeline_ring PROPERTIES DISABLED TRUE)
endif()

# ---- lint: luacheck over the Lua library with the repository's .luacheckrc (LuaJIT's
# globals, 120 columns). Debian's lua-check package; without it there is no such case.
find_program(LUACHECK_EXECUTABLE luacheck)
if(LUACHECK_EXECUTABLE)
  add_test(NAME lint/luacheck COMMAND ${LUACHECK_EXECUTABLE} --no-color lua WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
endif()

# ---- libember's boundary (tests/api/check_exports.lua): its dynamic symbols are exactly the
# EM_API declarations of the public headers plus the EM_PLUGIN_API ones of
# runtime/plugins/plugin_api.h. Needs nm (found by CMake with the compiler) and luajit.
file(GLOB EMBER_EXPORT_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/include/ember/*.h)
add_test(NAME api/exports
  COMMAND ${LUAJIT_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/api/check_exports.lua ${CMAKE_NM} $<TARGET_FILE:ember>
          ${EMBER_EXPORT_HEADERS} ${CMAKE_SOURCE_DIR}/runtime/plugins/plugin_api.h)

# ---- the examples (tests/examples/), each run as written at a small size, and the install
# (tests/install/): cmake --install into a temporary prefix, the installed ember used from there.
add_subdirectory(examples)
add_subdirectory(install)

# ---- `ember serve` end to end (tests/serve/test_serve.py): answers against the model's forward
# in a script, one by one and concurrent with mixed shapes, curl and http.client, every
# bad-input case, a full queue, metrics, loopback binding, SIGTERM. Needs the serve feature.
if(EMBER_HAVE_SERVE AND Python3_Interpreter_FOUND)
  add_test(NAME serve/http
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_serve.py $<TARGET_FILE:ember_host>)
  set_tests_properties(serve/http PROPERTIES ENVIRONMENT "EMBER_NUM_THREADS=2" TIMEOUT 180)
endif()
# The ZeroMQ endpoint (tests/serve/test_serve_zmq.py): the Python and Lua clients' answers
# against the script's forward, malformed messages answered with the field, a REQ peer, a
# full queue, loopback unless the YAML names an interface (zmq and http). Needs pyzmq, numpy.
if(EMBER_HAVE_SERVE AND EMBER_HAVE_ZMQ AND Python3_Interpreter_FOUND)
  add_test(NAME serve/zmq
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_serve_zmq.py $<TARGET_FILE:ember_host>
            ${CMAKE_SOURCE_DIR})
  set_tests_properties(serve/zmq PROPERTIES ENVIRONMENT "EMBER_NUM_THREADS=2" TIMEOUT 180 SKIP_RETURN_CODE 77)
  # A version swap under load (tests/serve/test_serve_versions.py): every answer, over HTTP and
  # ZeroMQ, is the old or the new version's output for its input, never an error; loads that
  # fail (a missing file, mismatched weights, a wrong output shape) leave the old one serving.
  add_test(NAME serve/versions
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_serve_versions.py
            $<TARGET_FILE:ember_host> ${CMAKE_SOURCE_DIR})
  set_tests_properties(serve/versions PROPERTIES ENVIRONMENT "EMBER_NUM_THREADS=2" TIMEOUT 240 SKIP_RETURN_CODE 77)
endif()
# pipelines/serve_fmnist_mlp.yaml serving a short training run's checkpoint: curl's classes
# equal a script's (tests/serve/test_fmnist.py; skipped without dataset-fashion-mnist).
if(EMBER_HAVE_SERVE AND Python3_Interpreter_FOUND)
  add_test(NAME serve/fmnist_mlp
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_fmnist.py $<TARGET_FILE:ember_host>
            ${CMAKE_SOURCE_DIR})
  set_tests_properties(serve/fmnist_mlp PROPERTIES ENVIRONMENT "EMBER_NUM_THREADS=2" TIMEOUT 300
    SKIP_RETURN_CODE 77)
endif()
