"""The SPLADE training loop of one process: training data, model, loss over the global batch, optimizer
and schedule, resumable checkpoints, the per-step log and the final model with its report."""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import cast

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from vtrepro.core import checkpoints
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import read_jsonl
from vtrepro.core.progress import Progress
from vtrepro.data.availability import data_path
from vtrepro.data.texts import dataset_or_file_texts
from vtrepro.model.idf import IDF_NAME, IdfQueryEncoder, read_idf_table
from vtrepro.model.loading import load_masked_lm
from vtrepro.model.splade import write_activation
from vtrepro.training import examples as training_examples
from vtrepro.training import losses
from vtrepro.training.distributed import Processes, rng_state, set_rng_state
from vtrepro.training.recipe import BeirData, MsmarcoData, PairsData, Recipe, TriplesData
from vtrepro.training.run_folder import (
    LOG_NAME,
    PLOT_NAME,
    PREPARED_NAME,
    TRAINING_REPORT,
    TrainerState,
    latest_checkpoint,
    plot_curves,
    read_trainer_fields,
    read_trainer_state,
    truncate_log,
    write_trainer_state,
)
from vtrepro.training.schedule import lr_factor
from vtrepro.training.splade_model import SpladeModel, set_dropout

logger = logging.getLogger(__name__)


def build_training_set(recipe: Recipe, data_dir, cache_dir: Path):
    """The recipe's training examples (BM25 negatives mined into ``cache_dir`` once)."""
    data = recipe.data
    if isinstance(data, TriplesData):
        return training_examples.TriplesTrainingSet(data_path(data.path, data_dir))
    if isinstance(data, PairsData):
        source = training_examples.PairsSource(
            data_path(data.path, data_dir) if data.path else None, data.hub, data.split,
            (data.query_field, data.document_field), data.max_examples, data.held_out)
        return training_examples.pairs_training_set(source, recipe.training.seed)
    if isinstance(data, BeirData):
        pairs_from = training_examples.BeirPairs(data.negatives, data.mining, data.depth, data.min_relevance)
        examples = training_examples.beir_training_set(data.dataset, data_dir, data.split, pairs_from, cache_dir)
    else:
        assert isinstance(data, MsmarcoData)
        examples = training_examples.msmarco_training_set(
            data_path(data.hard_negatives, data_dir), data_path(data.collection, data_dir),
            data_path(data.queries, data_dir), data.negatives, data.systems, data.per_system)
    if data.teacher:
        examples = training_examples.with_teacher(examples, data_path(data.teacher, data_dir))
    return examples


def idf_texts(recipe: Recipe, data_dir):
    """The corpus the IDF query weights are computed on: idf_corpus, else the training corpus."""
    if recipe.idf_corpus is not None:
        source = recipe.idf_corpus
        path = data_path(source, data_dir)
        return dataset_or_file_texts(str(path) if path.is_file() else source, data_dir)
    if isinstance(recipe.data, BeirData):
        return dataset_or_file_texts(recipe.data.dataset, data_dir)
    assert isinstance(recipe.data, MsmarcoData)
    return dataset_or_file_texts(str(data_path(recipe.data.collection, data_dir)), data_dir)


class Trainer:
    """The training loop of one process: batches, loss, optimizer, checkpoints, logs."""

    def __init__(self, recipe: Recipe, start: str, output: Path, data_dir, model_dir, processes: Processes):
        self.recipe, self.output, self.processes = recipe, output, processes
        self.training, self.loss_config = recipe.training, recipe.loss
        if self.training.batch_size % processes.world:
            raise VtreproError(f"{recipe.path}: training.batch_size {self.training.batch_size} is the global batch "
                               f"and must be divisible by the {processes.world} processes")
        self.checkpoint = latest_checkpoint(output)
        fields = read_trainer_fields(self.checkpoint, self.training.steps) if self.checkpoint is not None else None
        if fields is not None and fields["fingerprint"] != recipe.fingerprint():
            raise VtreproError(f"{output}: holds checkpoints of a different recipe (or older settings); "
                               "choose another --output or remove it to start over")
        self._load_model(start, model_dir)
        params = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        decay = [parameter for parameter in params if parameter.ndim > 1]
        no_decay = [parameter for parameter in params if parameter.ndim <= 1]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": self.training.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=self.training.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(
            self.training.schedule, self.training.lr_warmup_steps, self.training.steps))
        self.state: TrainerState | None = None
        if self.checkpoint is not None and fields is not None:  # checked before the data work below
            self.state = read_trainer_state(self.checkpoint, fields, self.optimizer, self.scheduler)
        self._prepare_data(data_dir)
        self.step = 0
        torch.manual_seed(self.training.seed + processes.rank)
        if processes.device.type == "cpu":
            self._pin_cpu_threads()
        if self.state is not None:
            self.optimizer.load_state_dict(self.state.optimizer)
            self.scheduler.load_state_dict(self.state.scheduler)
            self.step = self.state.step
            if processes.main:
                logger.info(f"resuming from {self.checkpoint} (step {self.step})")
            if self.state.world == processes.world:
                set_rng_state(self.state.rng[processes.rank])
            elif processes.main:
                logger.warning(f"resuming a {self.state.world}-process run with {processes.world}: same data order, "
                               "new dropout random streams")
        self.ddp: torch.nn.Module = self.model  # wrapped in DistributedDataParallel below when distributed
        if processes.world > 1:
            devices = [processes.device] if processes.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=devices)

    def _pin_cpu_threads(self) -> None:
        """Fix the CPU thread count for the whole run: the recipe's, else the resumed checkpoint's, else this
        process's default. Float sums (so the last bits of every update) depend on it, and a fresh process's
        default (cores, affinity, OMP_NUM_THREADS) need not be the interrupted run's; pinning also turns off
        MKL's dynamic thread choice."""
        saved = self.state.cpu_threads if self.state is not None else None
        threads = self.training.cpu_threads or saved or torch.get_num_threads()
        if saved and threads != saved and self.processes.main:
            logger.warning(f"resuming a run trained with {saved} CPU threads with {threads} (training.cpu_threads): "
                           "later steps will differ in their last bits")
        torch.set_num_threads(threads)

    def _load_model(self, start: str, model_dir) -> None:
        source = str(self.checkpoint) if self.checkpoint is not None else start
        mlm, self.tokenizer = load_masked_lm(source, model_dir, self.recipe.trust_remote_code)
        for name, value in (("max_length_query", self.training.max_length_query),
                            ("max_length_doc", self.training.max_length_doc)):
            limit = getattr(mlm.config, "max_position_embeddings", None)
            if limit is not None and value > limit:
                raise VtreproError(f"{self.recipe.path}: training.{name} {value} exceeds the model's limit "
                                   f"of {limit} tokens")
        self.model = SpladeModel(source, mlm, self.tokenizer, self.recipe.activation).to(self.processes.device)
        if self.training.dropout is not None:
            set_dropout(self.model, self.training.dropout)
        self.model.train()

    def _prepare_data(self, data_dir) -> None:
        """Mine negatives / compute IDF on rank 0, then load the (cached) data everywhere."""
        cache = self.output / "data"
        prepared = cache / PREPARED_NAME

        built = {}

        def prepare() -> None:
            cache.mkdir(parents=True, exist_ok=True)
            built["data"] = build_training_set(self.recipe, data_dir, cache)
            if self.recipe.query_encoder == "idf" and not (cache / IDF_NAME).is_file():
                IdfQueryEncoder.from_corpus(self.tokenizer, idf_texts(self.recipe, data_dir)).save(cache)
            prepared.touch()

        self.processes.main_first(self.output, prepared, prepare)
        self.data = built["data"] if built else build_training_set(self.recipe, data_dir, cache)
        self.idf = None
        if self.recipe.query_encoder == "idf":
            self.idf = IdfQueryEncoder(self.tokenizer, read_idf_table(cache / IDF_NAME, cache),
                                       self.training.max_length_query)

    def _tokenize(self, texts: list[str], max_length: int) -> dict[str, Tensor]:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return {key: value.to(self.processes.device) for key, value in batch.items()}

    def compute(self, step: int) -> tuple[Tensor, dict[str, float]]:
        """Loss of 0-based ``step`` over the global batch, and its metrics."""
        training, config, processes = self.training, self.loss_config, self.processes
        examples = training_examples.batch_examples(self.data, step, training.batch_size, training.seed,
                                  (processes.rank, processes.world))
        queries = [example.query for example in examples]
        documents = [self._tokenize([text for example in examples for text in example.documents],
                                    training.max_length_doc)]
        with torch.autocast(processes.device.type, dtype=torch.bfloat16, enabled=training.dtype == "bfloat16"):
            if self.idf is None:
                query_reps, doc_reps = self.ddp(self._tokenize(queries, training.max_length_query), *documents)
            else:
                (doc_reps,) = self.ddp(*documents)
                query_reps = self.idf.dense(queries, doc_reps.shape[1]).to(processes.device)
        query_reps, doc_reps = processes.gather(query_reps), processes.gather(doc_reps)
        if config.ranking == "infonce":
            ranking = losses.info_nce(query_reps, doc_reps, config.temperature, config.in_batch_negatives)
        else:
            teacher = processes.gather(torch.tensor([example.teacher for example in examples], device=processes.device))
            student = losses.group_scores(query_reps, doc_reps)
            ranking = (losses.margin_mse(student, teacher) if config.ranking == "margin_mse"
                       else losses.kl_distillation(student, teacher, config.temperature))
        regularizers = {"flops": losses.flops, "l1": losses.l1}
        positions = self.recipe.group_size if config.doc_flops_by_position else 1
        lambda_q = losses.warmup_weight(config.lambda_q, step + 1, config.flops_warmup_steps)
        lambda_d = losses.warmup_weight(config.lambda_d, step + 1, config.flops_warmup_steps)
        regularization = lambda_d * losses.document_regularizer(
            doc_reps, config.doc_regularizer, config.doc_active_threshold, positions)
        if self.idf is None:
            regularization = regularization + lambda_q * regularizers[config.query_regularizer](query_reps)
        loss = ranking + regularization
        with torch.no_grad():
            metrics = {"loss": loss.item(), "ranking_loss": ranking.item(), "regularization": float(regularization),
                       "flops_q": losses.flops(query_reps).item(), "flops_d": losses.flops(doc_reps).item(),
                       "active_q": losses.active_terms(query_reps).float().mean().item(),
                       "active_d": losses.active_terms(doc_reps).float().mean().item(),
                       "used_q": int(losses.used_terms(query_reps).item()),
                       "used_d": int(losses.used_terms(doc_reps).item()), "vocabulary": int(doc_reps.shape[1]),
                       "lambda_q": lambda_q, "lambda_d": lambda_d}
        return loss, metrics

    def train(self) -> Path:
        """Train from the current step to the recipe's last, checkpointing; returns the final folder."""
        training, processes = self.training, self.processes
        log_path = self.output / LOG_NAME
        if processes.main:
            truncate_log(log_path, self.step)
        progress = Progress(training.steps, "train", "step", initial=self.step, enabled=processes.main)
        with open(log_path, "a", encoding="utf-8") if processes.main else open(os.devnull, "w") as log:
            while self.step < training.steps:
                started = time.perf_counter()
                loss, metrics = self.compute(self.step)
                self.optimizer.zero_grad(set_to_none=True)
                (loss * processes.world).backward()  # DDP averages gradients; the loss is already global
                if training.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), training.max_grad_norm)
                metrics["lr"] = cast(float, self.scheduler.get_last_lr()[0])  # a float: the optimizer's lr is one
                self.optimizer.step()
                self.scheduler.step()
                self.step += 1
                metrics = {"step": self.step, **metrics, "seconds": round(time.perf_counter() - started, 4)}
                log.write(json.dumps(metrics) + "\n")
                log.flush()
                progress.set_postfix(loss=f"{metrics['loss']:.3f}", flops_d=f"{metrics['flops_d']:.2f}",
                                     active_d=f"{metrics['active_d']:.0f}", active_q=f"{metrics['active_q']:.0f}")
                progress.update()
                if self.step % training.save_every == 0 and self.step < training.steps:
                    self.save_checkpoint()
        progress.close()
        return self.save_final()

    def _extra_files(self, folder: Path) -> None:
        write_activation(folder, self.recipe.activation)
        if self.idf is not None:
            self.idf.save(folder)

    def save_checkpoint(self) -> None:
        """checkpoint-<step>/: HF folder + trainer state (JSON and safetensors, run_folder.write_trainer_state);
        older checkpoints beyond keep_checkpoints removed."""
        rng = self.processes.gather_objects(rng_state())
        if self.processes.main:
            state = TrainerState(step=self.step, fingerprint=self.recipe.fingerprint(), world=self.processes.world,
                                 cpu_threads=torch.get_num_threads(), optimizer=self.optimizer.state_dict(),
                                 scheduler=self.scheduler.state_dict(), rng=rng)

            def extra(folder: Path) -> None:
                self._extra_files(folder)
                write_trainer_state(folder, state, examples_seen=self.step * self.training.batch_size)

            checkpoints.save_checkpoint(self.output / f"checkpoint-{self.step:06d}", self.model.mlm, self.tokenizer,
                                        extra=extra, replace=True)
            for old in sorted(self.output.glob("checkpoint-*"))[:-self.training.keep_checkpoints]:
                shutil.rmtree(old)
            plot_curves(self.output / LOG_NAME, self.output / PLOT_NAME)
        self.processes.barrier()

    def save_final(self) -> Path:
        final = self.output / "final"
        if self.processes.main:
            log = [record for _, record in read_jsonl(self.output / LOG_NAME)]
            tail = log[-max(1, len(log) // 10):]
            report = {
                "recipe": str(self.recipe.path), "fingerprint": self.recipe.fingerprint(), "steps": self.step,
                "processes": self.processes.world, "device": str(self.processes.device),
                "cpu_threads": torch.get_num_threads(),
                "train_seconds": round(sum(record["seconds"] for record in log), 1),
                "data": getattr(self.data, "summary", {}),
                "last_10_percent": {key: round(sum(record[key] for record in tail) / len(tail), 4)
                                    for key in ("loss", "ranking_loss", "flops_q", "flops_d", "active_q", "active_d")},
            }
            checkpoints.save_checkpoint(final, self.model.mlm, self.tokenizer, {TRAINING_REPORT: report},
                                        self._extra_files, replace=True)
            plot_curves(self.output / LOG_NAME, self.output / PLOT_NAME)
            for old in self.output.glob("checkpoint-*"):
                shutil.rmtree(old)
        self.processes.barrier()
        return final
