"""triton_harness.py - start and stop the Triton Inference Server that the
nvidia-pytriton wheel carries, on loopback ports, with a model repository and
kiln's backend folder; shared by the Triton tests and bench/triton.

Server(repo, backends).start() returns when the server is ready (or raises
Unavailable with the reason, which callers turn into a skip)."""
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class Unavailable(Exception):
    """The server cannot run here (missing wheel, libraries, or it died)."""


def find_tritonserver():
    """Path of the tritonserver binary: $KILN_TRITONSERVER, else the one in
    the nvidia-pytriton wheel of this Python."""
    env = os.environ.get("KILN_TRITONSERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    try:
        import pytriton  # noqa: F401
    except ImportError:
        return None
    base = os.path.dirname(sys.modules["pytriton"].__file__)
    path = os.path.join(base, "tritonserver", "bin", "tritonserver")
    return path if os.access(path, os.X_OK) else None


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Server:
    def __init__(self, repo, backends, explicit=False, load=(), log=None, extra=()):
        self.repo, self.backends, self.explicit = repo, backends, explicit
        self.load, self.extra = list(load), list(extra)
        self.log_path = log or os.path.join(tempfile.mkdtemp(prefix="kiln_triton_log"), "server.log")
        self.proc = None

    def start(self, timeout=120):
        binary = find_tritonserver()
        if not binary:
            raise Unavailable("no tritonserver: install nvidia-pytriton (scripts/requirements.txt) "
                              "or set KILN_TRITONSERVER")
        last = None
        for _attempt in range(3):  # a port taken between free_ports() and the bind: retry
            self.http, self.grpc, self.metrics = free_ports(3)
            cmd = [binary, "--model-repository=" + self.repo, "--backend-directory=" + self.backends,
                   "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                   "--http-port=%d" % self.http, "--grpc-port=%d" % self.grpc,
                   "--metrics-port=%d" % self.metrics, "--allow-metrics=false",
                   "--exit-timeout-secs=10", "--log-verbose=0"]
            if self.explicit:
                cmd.append("--model-control-mode=explicit")
                cmd += ["--load-model=" + m for m in self.load]
            cmd += self.extra
            self.logf = open(self.log_path, "w")
            self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            t0 = time.time()
            while time.time() - t0 < timeout:
                if self.proc.poll() is not None:
                    break
                if self._ready():
                    return self
                time.sleep(0.25)
            last = self.tail()
            self.stop()
            if "address already in use" not in last.lower():
                break
        raise Unavailable("tritonserver did not become ready:\n" + last)

    def _ready(self):
        import urllib.request
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/v2/health/live" % self.http, timeout=1) as r:
                if r.status != 200:
                    return False
            # every model given at start is loaded (or failed) once the server is live
            return True
        except Exception:
            return False

    def tail(self, n=60):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.logf.close()
        self.rc = self.proc.returncode
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()


def backend_dir(build):
    """The folder holding backends/kiln/libtriton_kiln.so in a build tree."""
    d = os.path.join(build, "triton", "backends")
    return d if os.path.exists(os.path.join(d, "kiln", "libtriton_kiln.so")) else None


def build_plan(kiln, onnx, plan, shapes, extra=(), cwd=None):
    """kiln exec --onnx ... --saveEngine plan with one or more profiles:
    shapes = [(min, opt, max), ...] of "name:AxBxC" specs."""
    cmd = [kiln, "exec", "--onnx=" + onnx, "--saveEngine=" + plan, "--iterations=1",
           "--warmUp=0", "--duration=0"]
    for mn, op, mx in shapes:
        cmd += ["--minShapes=" + mn, "--optShapes=" + op, "--maxShapes=" + mx]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError("building %s failed:\n%s%s" % (plan, r.stdout[-3000:], r.stderr[-3000:]))


def kiln_exec_outputs(kiln, plan, inputs, workdir, profile=0):
    """Run the plan once with `kiln exec` on these numpy inputs; its outputs."""
    import numpy as np
    specs, shape_specs = [], []
    for name, arr in inputs.items():
        p = os.path.join(workdir, "in_%s.npy" % name)
        np.save(p, arr)
        specs.append("%s:%s" % (name, p))
        shape_specs.append("%s:%s" % (name, "x".join(str(d) for d in arr.shape)))
    out = os.path.join(workdir, "out.npz")
    cmd = [kiln, "exec", "--loadEngine=" + plan, "--shapes=" + ",".join(shape_specs),
           "--loadInputs=" + ",".join(specs), "--exportOutput=" + out,
           "--iterations=1", "--warmUp=0", "--duration=0", "--profile=%d" % profile]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("kiln exec failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def make_repo():
    return tempfile.mkdtemp(prefix="kiln_triton_repo")


def add_model(repo, name, artifact, config, version=1, artifact_name=None):
    d = os.path.join(repo, name, str(version))
    os.makedirs(d, exist_ok=True)
    if artifact:
        shutil.copy(artifact, os.path.join(d, artifact_name or os.path.basename(artifact)))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)
    return os.path.join(repo, name)
