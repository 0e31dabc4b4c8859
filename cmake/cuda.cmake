# cuda.cmake - the CUDA backend (src/backends/cuda): compiled into kiln and
# kiln_internal when nvcc is found. Needs the CUDA runtime, cuBLASLt and
# cuDNN at link time only; nothing touches a GPU until a CUDA kernel or the
# backend's describe() is called, so the library loads on machines without one.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  option(KILN_CUDA "Build the CUDA backend" ON)
else()
  option(KILN_CUDA "Build the CUDA backend" OFF)
endif()

if(KILN_CUDA)
  # Targets are named explicitly below (sm_90 code plus compute_90 PTX that
  # newer GPUs compile at load); CMake's own architecture list stays out.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  get_filename_component(KILN_CUDA_ROOT "${CUDAToolkit_LIBRARY_DIR}/.." ABSOLUTE)
  find_library(KILN_CUDNN_LIB NAMES cudnn libcudnn.so.9
    HINTS ${CUDAToolkit_LIBRARY_DIR} ${KILN_CUDA_ROOT}/lib ${KILN_CUDA_ROOT}/lib64
          /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib
          /usr/lib/x86_64-linux-gnu)
  find_path(KILN_CUDNN_INCLUDE cudnn.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
  if(NOT KILN_CUDNN_LIB OR NOT KILN_CUDNN_INCLUDE)
    message(FATAL_ERROR "KILN_CUDA is on but cuDNN was not found (set KILN_CUDNN_LIB and KILN_CUDNN_INCLUDE, or -DKILN_CUDA=OFF)")
  endif()
  message(STATUS "kiln: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, cuDNN ${KILN_CUDNN_LIB})")

  file(GLOB KILN_CUDA_SOURCES CONFIGURE_DEPENDS
    ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/*.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/*.c)
  # Kernels on Hopper's wgmma exist only in the architecture-specific target
  # sm_90a: those files build apart, for it alone (no PTX), and are launched
  # only on a device of compute capability 9.0.
  set(KILN_CUDA_SM90A_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/attention_wgmma.cu)
  list(REMOVE_ITEM KILN_CUDA_SOURCES ${KILN_CUDA_SM90A_SOURCES})
  add_library(kiln_cuda_obj OBJECT ${KILN_CUDA_SOURCES})
  add_library(kiln_cuda_sm90a_obj OBJECT ${KILN_CUDA_SM90A_SOURCES})
  target_include_directories(kiln_cuda_obj PRIVATE include src ${KILN_CUDNN_INCLUDE})
  target_link_libraries(kiln_cuda_obj PRIVATE CUDA::cudart CUDA::cublasLt)
  target_compile_definitions(kiln_cuda_obj PRIVATE KILN_HAVE_CUDA=1)
  # The directory's warning flags are for the C compiler; nvcc takes its
  # host-compiler flags through -Xcompiler.
  set_property(TARGET kiln_cuda_obj PROPERTY COMPILE_OPTIONS
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fvisibility=hidden>
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
  target_include_directories(kiln_cuda_sm90a_obj PRIVATE include src)
  target_link_libraries(kiln_cuda_sm90a_obj PRIVATE CUDA::cudart)
  set_property(TARGET kiln_cuda_sm90a_obj PROPERTY COMPILE_OPTIONS
    -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fvisibility=hidden
    -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo)
  if(KILN_WERROR)
    set_property(TARGET kiln_cuda_obj APPEND PROPERTY COMPILE_OPTIONS
      $<$<COMPILE_LANGUAGE:C>:-Werror> $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
    set_property(TARGET kiln_cuda_sm90a_obj APPEND PROPERTY COMPILE_OPTIONS -Werror=all-warnings)
  endif()
  set_target_properties(kiln_cuda_obj kiln_cuda_sm90a_obj PROPERTIES POSITION_INDEPENDENT_CODE ON
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON C_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden CUDA_ARCHITECTURES OFF)

  foreach(t kiln kiln_internal)
    set_target_properties(${t} PROPERTIES CUDA_ARCHITECTURES OFF)
    target_sources(${t} PRIVATE $<TARGET_OBJECTS:kiln_cuda_obj> $<TARGET_OBJECTS:kiln_cuda_sm90a_obj>)
    target_compile_definitions(${t} PRIVATE KILN_HAVE_CUDA=1)
  endforeach()
  target_link_libraries(kiln PRIVATE CUDA::cudart CUDA::cublasLt ${KILN_CUDNN_LIB})
  target_link_libraries(kiln_internal PUBLIC CUDA::cudart CUDA::cublasLt ${KILN_CUDNN_LIB})
  target_compile_definitions(kiln_internal PUBLIC KILN_HAVE_CUDA=1)
  target_include_directories(kiln_internal PUBLIC ${CUDAToolkit_INCLUDE_DIRS} ${KILN_CUDNN_INCLUDE})
  set(KILN_HAVE_CUDA ON)
endif()

if(KILN_CUDA)
  # Kernel-level GPU micro benchmark (bench/gpu); not a test.
  add_executable(bench_cuda_kernels bench/gpu/bench_cuda_kernels.c)
  target_link_libraries(bench_cuda_kernels PRIVATE kiln_internal)
  set_target_properties(bench_cuda_kernels PROPERTIES CUDA_ARCHITECTURES OFF
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  # A GEMM on Hopper's wgmma and TMA against cuBLAS (bench/gpu); sm_90a, the
  # architecture-specific target wgmma needs. Not a test.
  add_executable(wgmma_probe bench/gpu/wgmma_probe.cu)
  target_link_libraries(wgmma_probe PRIVATE CUDA::cudart CUDA::cublas)
  set_property(TARGET wgmma_probe PROPERTY COMPILE_OPTIONS
    -Xcompiler=-Wall,-Wextra -gencode=arch=compute_90a,code=sm_90a)
  set_target_properties(wgmma_probe PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  # What a switch between kernels costs in a CUDA graph: the L1/shared
  # carveout, clusters, a cuBLASLt GEMM after a LayerNorm-like kernel (bench/gpu).
  add_executable(carveout_probe bench/gpu/carveout_probe.cu)
  target_link_libraries(carveout_probe PRIVATE CUDA::cudart CUDA::cublasLt)
  set_property(TARGET carveout_probe PROPERTY COMPILE_OPTIONS -Xcompiler=-Wall,-Wextra -gencode=arch=compute_90,code=sm_90)
  set_target_properties(carveout_probe PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
